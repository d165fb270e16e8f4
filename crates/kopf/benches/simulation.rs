//! The `children` example under deterministic simulation: N seeds (default 500) with kills,
//! API faults, latency and late watch events, on every core; prints the wall time, the
//! seeds per second and what the runs did. `cargo xtask bench simulation` runs it;
//! `cargo bench -p kopf --bench simulation -- 2000` runs 2,000 seeds.

#[path = "../examples/children.rs"]
#[allow(dead_code)]
mod children;

use std::time::Instant;

use kopf::testing::sim::{Scenario, Simulation};
use serde_json::json;

fn main() {
    let seeds: u64 = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(500);
    let scenario = Scenario::new("kopf.dev/v1", "KopfExample", "kopfexamples")
        .create(json!({"metadata": {"name": "a"}, "spec": {"field": "x"}}))
        .create(json!({"metadata": {"name": "b"}, "spec": {"field": "y"}}))
        .patch("a", json!({"spec": {"field": "z"}}))
        .create(json!({"metadata": {"name": "c"}, "spec": {"field": "w"}}))
        .delete("c");
    let crd = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/crd.yaml");
    let simulation = Simulation::new(children::operator, scenario).crds(crd);
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let started = Instant::now();
    let result = simulation.run_seeds(0..seeds);
    let wall = started.elapsed();
    match result {
        Ok(summary) => {
            let build = if cfg!(debug_assertions) {
                "dev"
            } else {
                "optimized"
            };
            println!(
                "simulation of the children example ({build} build): {seeds} seeds in {:.1} s \
                 on {cores} cores ({:.0} seeds/s)",
                wall.as_secs_f64(),
                seeds as f64 / wall.as_secs_f64()
            );
            println!("{summary}");
        }
        Err(failure) => {
            eprintln!("{failure}");
            std::process::exit(1);
        }
    }
}
