//! Stop signals: SIGINT and SIGTERM, and the deadline after the first one.

use std::time::Duration;

/// Completes on the first SIGINT/SIGTERM. From then on, a second signal exits the process
/// at once, and so does the end of `hard_timeout`.
pub(crate) async fn stop_signal_then_deadline(grace: Duration, hard_timeout: Duration) {
    stop_signal().await;
    tracing::info!(
        "Stopping: running handlers get {}s to finish; a second signal exits at once; the process exits within {}s.",
        grace.as_secs_f64(),
        hard_timeout.as_secs_f64()
    );
    // A thread, not a task: it fires even if the runtime is stuck.
    std::thread::spawn(move || {
        std::thread::sleep(hard_timeout);
        tracing::error!(
            "Still running {}s after the stop signal: exiting now.",
            hard_timeout.as_secs_f64()
        );
        crate::logging::flush();
        std::process::exit(1);
    });
    tokio::spawn(async {
        stop_signal().await;
        tracing::warn!("A second stop signal: exiting at once.");
        crate::logging::flush();
        std::process::exit(1);
    });
}

/// Completes on SIGINT (Ctrl-C) or SIGTERM.
pub(crate) async fn stop_signal() {
    #[cfg(unix)]
    {
        let mut term =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = async { match term.as_mut() { Some(t) => { t.recv().await; } None => std::future::pending::<()>().await } } => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
    tracing::info!("Stop requested; stopping.");
}
