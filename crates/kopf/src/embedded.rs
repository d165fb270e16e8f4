//! What the commands with an embedded API server (`run --fake`, `rbac`) say and clean up:
//! how to give it a missing CRD, the `kubectl` line to look at it, the removal of the
//! kubeconfig `run --fake` wrote.

use std::path::PathBuf;

use crate::error::Error;

/// The embedded API servers of the commands, for the messages about what they lack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Embedded {
    /// `run --fake`.
    #[cfg(feature = "testing")]
    RunFake,
    /// `rbac` without `--cluster`.
    Rbac,
}

/// How to give the embedded API server of `run --fake` or `rbac` a missing
/// CustomResourceDefinition, given the manifests of the command line (`given`) and the
/// operator's development manifests (`defaults`, applied when none are given).
pub(crate) fn crd_fix(embedded: Embedded, given: &[PathBuf], defaults: &[PathBuf]) -> String {
    let list = |files: &[PathBuf]| {
        files
            .iter()
            .map(|f| f.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let (server, example, or_cluster) = match embedded {
        #[cfg(feature = "testing")]
        Embedded::RunFake => ("the embedded API server of --fake", "run --fake", ""),
        Embedded::Rbac => (
            "the embedded API server of `rbac`",
            "rbac",
            ", or resolve the resources on the current cluster with `rbac --cluster`",
        ),
    };
    let lacks = if !given.is_empty() {
        format!(
            "none of the manifests applied to {server} ({}) defines its CustomResourceDefinition",
            list(given)
        )
    } else if !defaults.is_empty() {
        format!(
            "none of the operator's development manifests applied to {server} ({}) defines its CustomResourceDefinition",
            list(defaults)
        )
    } else {
        format!("{server} has no CustomResourceDefinition for it (nothing was applied)")
    };
    format!(
        "{lacks}: give the CRD's manifest with --apply FILE (`{example} --apply crd.yaml`){or_cluster}"
    )
}

/// A resource that the embedded API server does not serve, as [`Error::MissingCrd`](crate::Error::MissingCrd) with
/// the fix for the command (other errors are returned as they are). When resources of a
/// similar name are served, the name is likelier misspelt than the CRD missing: the fix
/// says so first.
pub(crate) fn missing_crd(error: Error, fix: impl FnOnce() -> String) -> Error {
    match error {
        Error::Watch(kopf_watch::WatchError::UnknownResource { selector, hint }) => {
            let fix = if hint.is_empty() {
                fix()
            } else {
                format!(
                    "if the name is misspelt, correct it where the handler is registered; if not, {}",
                    fix()
                )
            };
            Error::MissingCrd {
                selector,
                similar: hint,
                fix,
            }
        }
        other => other,
    }
}

/// `kubectl get a,b` for the resources these registrations serve among `all` (`plural`, or
/// `plural.group` when other groups serve the same plural); `kubectl api-resources` when none
/// resolves, or too many to list.
#[cfg(feature = "testing")]
pub(crate) fn kubectl_get(
    registrations: &[(kopf_watch::Selector, kopf_core::handler::HandlerSpec)],
    all: &[kopf_watch::Discovered],
) -> String {
    /// More resources than this are not listed.
    const MAX: usize = 8;
    let mut names: Vec<String> = Vec::new();
    for (selector, _) in registrations {
        for d in selector.resolve(all).unwrap_or_default() {
            let ar = &d.api_resource;
            let shared = all
                .iter()
                .any(|o| o.api_resource.plural == ar.plural && o.api_resource.group != ar.group);
            let name = if ar.group.is_empty() || !shared {
                ar.plural.clone()
            } else {
                format!("{}.{}", ar.plural, ar.group)
            };
            if !names.contains(&name) {
                names.push(name);
            }
        }
    }
    if names.is_empty() || names.len() > MAX {
        "kubectl api-resources".into()
    } else {
        format!("kubectl get {}", names.join(","))
    }
}

/// Removes the kubeconfig `run --fake` wrote at [`default_fake_kubeconfig`](crate::cli::default_fake_kubeconfig), and its
/// directory if nothing else is in it.
#[cfg(feature = "testing")]
pub(crate) fn remove_fake_kubeconfig(path: &std::path::Path) {
    if std::fs::remove_file(path).is_ok()
        && let Some(dir) = path.parent()
    {
        // Fails, and keeps the directory, when something else was put in it.
        let _ = std::fs::remove_dir(dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_similar_name_is_hinted_as_a_typo_before_the_missing_crd() {
        let unknown = |hint: &str| {
            Error::Watch(kopf_watch::WatchError::UnknownResource {
                selector: "kopfexampels".into(),
                hint: hint.into(),
            })
        };
        let fix = || crd_fix(Embedded::Rbac, &[], &[PathBuf::from("crd.yaml")]);
        let typo = missing_crd(unknown("; similar: kopfexamples.kopf.dev"), fix).to_string();
        assert!(
            typo.starts_with(
                r#"no served resource matches "kopfexampels"; similar: kopfexamples.kopf.dev; if the name is misspelt, correct it where the handler is registered; if not, none of the operator's development manifests"#
            ),
            "{typo}"
        );
        let missing = missing_crd(unknown(""), fix).to_string();
        assert!(
            missing.starts_with(
                r#"no served resource matches "kopfexampels"; none of the operator's development manifests applied to the embedded API server of `rbac` (crd.yaml) defines its CustomResourceDefinition: give"#
            ),
            "{missing}"
        );
    }
}
