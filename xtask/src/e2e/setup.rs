//! What some examples need around them on the cluster: another CRD (restored afterwards),
//! and a host of this machine that the API server reaches for webhooks.

use std::path::PathBuf;

use anyhow::{Result, bail};
use kopf_testing::{Cluster, ClusterKind};

use super::scenarios::*;

/// Where the workspace, the `kopf` binary and the example binaries are.
pub(crate) struct Paths {
    pub(crate) root: PathBuf,
    pub(crate) kopf: PathBuf,
    pub(crate) examples: PathBuf,
}

/// Sets up what the scenario needs beyond `examples/crd.yaml`; returns the operator's extra
/// `run` arguments.
pub(crate) async fn prepare(
    cluster: &Cluster,
    paths: &Paths,
    setup: &Setup,
) -> Result<Vec<String>> {
    let mut args = Vec::new();
    if setup.webhooks.is_some() {
        // A free port (0): two scenarios, or another program, may want 9443.
        args.extend(["--webhook-port".to_string(), "0".to_string()]);
        // Found before anything changes in the cluster: the missing host is the likely error.
        if let Some(host) = webhook_host(cluster).await? {
            args.extend(["--webhook-host".to_string(), host]);
        }
    }
    if let Some(crd) = setup.crd {
        cluster.apply_file(paths.root.join(crd)).await?;
    }
    if let Some(object) = setup.object {
        let (file, name) = object.crd;
        cluster.apply_file(paths.root.join(file)).await?;
        cluster
            .kubectl([
                "wait",
                "--for=condition=Established",
                &format!("crd/{name}"),
                "--timeout=60s",
            ])
            .await?;
    }
    Ok(args)
}

/// Undoes `prepare`: the plain CRD again (no conversion, v1 only), and no webhook
/// configurations.
pub(crate) async fn restore(cluster: &Cluster, paths: &Paths, setup: &Setup) -> Result<()> {
    if let Some(name) = setup.webhooks {
        for kind in [
            "validatingwebhookconfigurations",
            "mutatingwebhookconfigurations",
        ] {
            cluster
                .kubectl(["delete", kind, name, "--ignore-not-found"])
                .await?;
        }
    }
    if setup.crd.is_some() {
        // `apply` keeps fields it did not set: the operator's conversion stanza goes first.
        cluster
            .kubectl([
                "patch",
                "crd",
                "kopfexamples.kopf.dev",
                "--type",
                "merge",
                "-p",
                r#"{"spec":{"conversion":{"strategy":"None","webhook":null}}}"#,
            ])
            .await?;
        cluster
            .apply_file(paths.root.join("examples/crd.yaml"))
            .await?;
    }
    Ok(())
}

/// The host name in the webhook URLs, as the cluster's API server reaches this machine:
/// `KOPF_E2E_WEBHOOK_HOST` if set; the default (`localhost`) for the fake API server, a
/// process here; the gateway of kind's container network for kind.
pub(crate) async fn webhook_host(cluster: &Cluster) -> Result<Option<String>> {
    if let Ok(host) = std::env::var("KOPF_E2E_WEBHOOK_HOST") {
        return Ok(Some(host));
    }
    match cluster.kind() {
        ClusterKind::Fake => Ok(None),
        ClusterKind::Kind => {
            for engine in ["docker", "podman"] {
                let out = tokio::process::Command::new(engine)
                    .args([
                        "network",
                        "inspect",
                        "kind",
                        "--format",
                        "{{range .IPAM.Config}}{{.Gateway}} {{end}}",
                    ])
                    .output()
                    .await;
                if let Ok(out) = out
                    && out.status.success()
                {
                    let text = String::from_utf8_lossy(&out.stdout).into_owned();
                    if let Some(ip) = text.split_whitespace().find(|a| !a.contains(':')) {
                        return Ok(Some(ip.to_string()));
                    }
                }
            }
            bail!(
                "cannot find the gateway of kind's container network (`docker network inspect kind`); set KOPF_E2E_WEBHOOK_HOST to an address of this machine that the kind nodes reach"
            )
        }
        ClusterKind::Current | ClusterKind::Container => bail!(
            "the webhooks need an address of this machine that the cluster's API server reaches: set KOPF_E2E_WEBHOOK_HOST (or skip this example: --example NAME for the others)"
        ),
    }
}
