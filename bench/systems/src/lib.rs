//! Shared bits of the benchmark's baseline systems (see the README).

use std::future::Future;
use std::io::IsTerminal;

use kube::core::{ApiResource, GroupVersionKind};
use tokio::signal::unix::{SignalKind, signal};
use tracing_subscriber::EnvFilter;

/// The watched resource: `kopfexamples.kopf.dev/v1`, kind `KopfExample`.
pub fn kopfexamples() -> ApiResource {
    let gvk = GroupVersionKind::gvk("kopf.dev", "v1", "KopfExample");
    ApiResource::from_gvk_with_plural(&gvk, "kopfexamples")
}

/// Logs to stderr: this binary's own `info` lines, everyone's warnings. `RUST_LOG` overrides.
pub fn init_logging(crate_name: &str) {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new(format!("warn,{crate_name}=info")));
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_env_filter(filter)
        .init();
}

/// Installs the SIGTERM and SIGINT handlers now; the returned future resolves on the first of them.
pub fn shutdown_signal() -> std::io::Result<impl Future<Output = ()> + Send + 'static> {
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
    })
}
