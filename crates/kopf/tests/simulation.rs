//! Deterministic simulation: the `children` example under kills, API faults and late
//! watch events, from seeds. Its first version named each child with `generateName`, so a
//! second run of the handler — after a kill between the child's creation and the result's
//! write, or a create whose answer was lost — made a second child. The simulation finds
//! that within a few seeds; the example now names the child after its owner.

#[path = "../examples/children.rs"]
mod children_example;

use kopf::prelude::*;
use kopf::testing::sim::{FaultPlan, Invariant, Scenario, Simulation, World};
use kube::api::{Api, DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

/// Three owners created, one changed, one deleted, interleaved by the seed.
fn scenario() -> Scenario {
    Scenario::new("kopf.dev/v1", "KopfExample", "kopfexamples")
        .create(json!({"metadata": {"name": "a"}, "spec": {"field": "x"}}))
        .create(json!({"metadata": {"name": "b"}, "spec": {"field": "y"}}))
        .patch("a", json!({"spec": {"field": "z"}}))
        .create(json!({"metadata": {"name": "c"}, "spec": {"field": "w"}}))
        .delete("c")
}

/// Every surviving owner has exactly one ConfigMap of its own.
fn one_child_per_owner() -> Invariant {
    Invariant::new("one child per owner", |world: &World| {
        let bad: Vec<String> = world
            .survivors()
            .filter_map(|owner| {
                let children = world
                    .stored_of_kind("ConfigMap")
                    .filter(|cm| {
                        cm["metadata"]["ownerReferences"]
                            .as_array()
                            .is_some_and(|refs| refs.iter().any(|r| r["uid"] == owner.uid))
                    })
                    .count();
                (children != 1).then(|| format!("{}: {children} children", owner.object))
            })
            .collect();
        if bad.is_empty() { Ok(()) } else { Err(bad) }
    })
}

fn simulation(operator: fn() -> Operator) -> Simulation {
    Simulation::new(operator, scenario())
        .crds("../../examples/crd.yaml")
        .invariant(one_child_per_owner())
}

/// The first version of the example's handler: a child with a generated name, made
/// again by every run of the handler.
async fn naive_create_fn(
    Body(body): Body,
    Spec(spec): Spec,
    Client(client): Client,
) -> Result<Value, HandlerError> {
    let mut child = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "data": {"field": spec["field"].as_str().unwrap_or_default()}});
    kopf::hierarchy::adopt(&mut child, &body)?;
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("", "v1", "ConfigMap"),
        "configmaps",
    );
    let api: Api<DynamicObject> = Api::namespaced_with(client, "default", &ar);
    let child: DynamicObject = serde_json::from_value(child)?;
    let created = api
        .create(&PostParams::default(), &child)
        .await
        .map_err(HandlerError::other)?;
    Ok(json!({"child": created.metadata.name}))
}

fn naive_operator() -> Operator {
    Operator::new().on_create("kopfexamples", "create_fn", naive_create_fn)
}

#[test]
fn the_naive_handler_fails_within_50_seeds_and_its_seed_replays() {
    let sim = simulation(naive_operator);
    let failure = sim
        .run_seeds(0..50)
        .expect_err("a second child within 50 seeds");
    assert_eq!(failure.invariant, "one child per owner", "{failure}");
    let message = failure.to_string();
    assert!(
        message.contains(&format!("KOPF_SIM_SEED={}", failure.seed)),
        "{message}"
    );
    // The printed seed replays the same failure, twice in a row.
    for _ in 0..2 {
        let again = sim.run(failure.seed).expect_err("the seed fails again");
        assert_eq!(
            (&again.invariant, &again.details),
            (&failure.invariant, &failure.details),
            "{again}"
        );
    }
}

#[test]
fn the_example_passes_the_same_seeds() {
    let summary = simulation(children_example::operator)
        .run_seeds(0..50)
        .unwrap_or_else(|failure| panic!("{failure}"));
    assert_eq!(summary.runs, 50);
    assert!(summary.kills > 0 && summary.faults > 0, "{summary}");
}

#[test]
fn without_faults_every_run_passes_and_nothing_is_injected() {
    let summary = simulation(naive_operator)
        .faults(FaultPlan::none())
        .run_seeds(0..10)
        .unwrap_or_else(|failure| panic!("{failure}"));
    assert_eq!(
        (summary.runs, summary.kills, summary.faults),
        (10, 0, 0),
        "{summary}"
    );
}

/// The whole run of a seed — every request, answer, handler attempt and kill, at the same
/// operator time — is the same run after run: the clock is paused, each request's fate and
/// the operator's jitter follow the seed.
#[test]
fn a_seed_gives_the_same_run_every_time() {
    let sim = chaos_simulation();
    let mut differ = Vec::new();
    for seed in 0..20 {
        let first = sim
            .run(seed)
            .unwrap_or_else(|f| panic!("{f}"))
            .history
            .trace();
        let second = sim
            .run(seed)
            .unwrap_or_else(|f| panic!("{f}"))
            .history
            .trace();
        if first != second {
            let at = first.iter().zip(&second).position(|(a, b)| a != b);
            differ.push(format!(
                "seed {seed}: first difference at line {at:?} of {}",
                first.len()
            ));
        }
    }
    assert!(differ.is_empty(), "{differ:#?}");
}

/// The operator of `cargo xtask chaos`, in a test: each handler stores the spec's value.
fn counting_operator() -> Operator {
    async fn value(Spec(spec): Spec) -> Result<Value, HandlerError> {
        Ok(json!({"value": spec["value"]}))
    }
    async fn deleted() -> Result<Value, HandlerError> {
        Ok(Value::Null)
    }
    Operator::new()
        .on_create("kopfexamples", "create_fn", value)
        .on_update("kopfexamples", "update_fn", value)
        .on_delete("kopfexamples", "delete_fn", deleted)
}

/// The chaos run's own invariant: each survivor's status holds its latest value.
fn latest_value_stored() -> Invariant {
    Invariant::new("final status written", |world: &World| {
        let bad: Vec<String> = world
            .survivors()
            .filter_map(|o| {
                let stored = world.stored(&o.uid)?;
                let latest = &stored["spec"]["value"];
                let status = &stored["status"];
                let update = &status["update_fn"]["value"];
                let create = &status["create_fn"]["value"];
                let ok = update == latest || (update.is_null() && create == latest);
                (!ok).then(|| format!("{}: spec.value {latest}, status {status}", o.object))
            })
            .collect();
        if bad.is_empty() { Ok(()) } else { Err(bad) }
    })
}

fn chaos_simulation() -> Simulation {
    Simulation::new(counting_operator, chaos_scenario())
        .crds("../../examples/crd.yaml")
        .invariant(latest_value_stored())
}

/// Four objects created and changed twice, two of them deleted.
fn chaos_scenario() -> Scenario {
    let mut scenario = Scenario::new("kopf.dev/v1", "KopfExample", "kopfexamples");
    for name in ["a", "b", "c", "d"] {
        scenario = scenario
            .create(json!({"metadata": {"name": name}, "spec": {"value": 1}}))
            .patch(name, json!({"spec": {"value": 2}}))
            .patch(name, json!({"spec": {"value": 3}}));
    }
    scenario.delete("b").delete("d")
}

#[test]
fn the_chaos_invariants_hold_under_simulation() {
    let summary = chaos_simulation()
        .run_seeds(0..100)
        .unwrap_or_else(|failure| panic!("{failure}"));
    assert!(summary.kills > 20 && summary.faults > 50, "{summary}");
}

/// The chaos operator with a timer that reads nothing of the objects: they are kept trimmed
/// to their metadata and status, and so is the state an idle worker keeps for them. Under
/// kills and faults (a read after a slow watch that fails, a 409, a lost answer) no cycle
/// runs on a trimmed state: it would see the spec gone, and store a null.
#[test]
fn the_chaos_invariants_hold_with_a_timer_that_keeps_objects_trimmed() {
    fn with_timer() -> Operator {
        let every = kopf::TimerOptions::every(std::time::Duration::from_secs(5));
        counting_operator().timer("kopfexamples", "tick", every, |Name(_): Name| async {
            Ok::<_, HandlerError>(json!("tick"))
        })
    }
    let sim = Simulation::new(with_timer, chaos_scenario())
        .crds("../../examples/crd.yaml")
        .invariant(latest_value_stored())
        .converge_for(std::time::Duration::from_secs(30));
    let summary = sim
        .run_seeds(0..60)
        .unwrap_or_else(|failure| panic!("{failure}"));
    assert!(summary.kills > 10 && summary.faults > 30, "{summary}");
}

#[tokio::test]
async fn inside_a_runtime_a_run_says_where_to_call_it_from() {
    let failure = simulation(naive_operator)
        .run(0)
        .expect_err("no runtime inside a runtime");
    assert_eq!(failure.invariant, "the run can be made");
    assert!(failure.to_string().contains("plain #[test]"), "{failure}");
}

/// An operator with only a timer: Kopf stores no diff base and adds no finalizer, and the
/// contract does not ask for them.
#[test]
fn the_contract_asks_nothing_of_an_operator_without_changing_handlers() {
    fn ticking() -> Operator {
        let every = kopf::TimerOptions::every(std::time::Duration::from_secs(1));
        Operator::new().timer("kopfexamples", "tick", every, || async {
            Ok::<_, HandlerError>(json!("tick"))
        })
    }
    let summary = Simulation::new(ticking, scenario())
        .crds("../../examples/crd.yaml")
        .converge_for(std::time::Duration::from_secs(10))
        .run_seeds(0..5)
        .unwrap_or_else(|failure| panic!("{failure}"));
    assert!(summary.handler_runs > 0, "{summary}");
}
