//! The `fake-apiserver` command: the embedded fake API server on its own.

#[cfg(feature = "testing")]
use std::time::Duration;

use crate::cli;
use crate::error::Error;
#[cfg(feature = "testing")]
use crate::signals::stop_signal;

/// `fake-apiserver`: the in-memory Kubernetes API server until SIGINT/SIGTERM. Prints
/// `listening on URL` on stdout once it serves (after the kubeconfig is written and the
/// manifests are applied).
pub async fn fake_apiserver(args: cli::FakeApiserverArgs) -> Result<(), Error> {
    #[cfg(feature = "testing")]
    {
        use std::io::Write;
        let (major, minor) = &args.kube_version;
        let mut builder = kopf_testing::FakeApiServer::builder()
            .port(args.port)
            .version(major, minor)
            .history_limit(args.history_limit)
            .bookmark_interval(Duration::from_secs(args.bookmark_interval.max(1)))
            .crd_establish_delay(Duration::from_millis(args.crd_establish_delay_ms))
            .tls(args.tls);
        if args.simulate_pods {
            builder = builder.simulate_pods(
                kopf_testing::PodSimulation::default()
                    .job_run_time(Duration::from_millis(args.pod_job_run_ms)),
            );
        }
        let server = builder.start().await?;
        if let Some(path) = &args.kubeconfig {
            server.write_kubeconfig(path)?;
        }
        for file in &args.apply {
            let n = server.apply_file(file)?;
            tracing::info!("applied {n} object(s) from {}", file.display());
        }
        let mut out = format!("listening on {}\n", server.url());
        if let Some(path) = &args.kubeconfig {
            out.push_str(&format!(
                "kubeconfig written to {p}; try: KUBECONFIG={p} kubectl get namespaces\n",
                p = path.display()
            ));
        }
        let mut stdout = std::io::stdout().lock();
        stdout
            .write_all(out.as_bytes())
            .and_then(|()| stdout.flush())
            .map_err(Error::Output)?;
        drop(stdout);
        stop_signal().await;
        server.shutdown().await;
        Ok(())
    }
    #[cfg(not(feature = "testing"))]
    {
        let _ = args;
        Err(Error::NoFake)
    }
}
