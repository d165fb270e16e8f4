//! Garbage collection: dependents of a removed owner by ownerReferences, and the cleanup
//! that advances terminating namespaces and CRDs.

use std::sync::Arc;

use serde_json::Value;

use crate::apiserver::storage::ResKey;

use super::crd::CRD_CLEANUP_FINALIZER;
use super::meta::{finalizers, meta, meta_mut, meta_str};
use super::options::DeleteOptions;
use super::state::State;

impl State {
    /// Deletes (Background) or orphans (Orphan) the dependents of a removed owner.
    pub(super) fn collect_dependents(&mut self, owner_uid: &str, policy: &str) {
        for (res, key) in self.store.dependents(owner_uid) {
            let Some(obj) = self.store.get(&res, &key) else {
                continue;
            };
            let Some(def) = self
                .defs()
                .into_iter()
                .find(|d| Self::res_key(d) == res)
                .cloned()
            else {
                continue;
            };
            if policy == "Orphan" {
                let mut new = (*obj).clone();
                if let Some(refs) = meta_mut(&mut new)
                    .get_mut("ownerReferences")
                    .and_then(Value::as_array_mut)
                {
                    refs.retain(|r| r.get("uid").and_then(Value::as_str) != Some(owner_uid));
                }
                self.store.put(&res, &key, new);
                continue;
            }
            // Dependents with other living owners stay.
            let other_owners = meta(&obj)
                .get("ownerReferences")
                .and_then(Value::as_array)
                .map(|refs| {
                    refs.iter()
                        .filter_map(|r| r.get("uid").and_then(Value::as_str))
                        .any(|u| u != owner_uid && self.uid_exists(u))
                })
                .unwrap_or(false);
            if other_owners {
                continue;
            }
            let opts = DeleteOptions {
                propagation: Some("Background".into()),
                ..Default::default()
            };
            let ns = (!key.0.is_empty()).then_some(key.0.as_str());
            if let Err(e) = self.delete(&def, ns, &key.1, &opts) {
                tracing::debug!(error = %e, "garbage collection could not delete a dependent");
            }
        }
    }

    fn uid_exists(&self, uid: &str) -> bool {
        self.store.resources().iter().any(|res| {
            self.store
                .list(res, None)
                .iter()
                .any(|(_, o)| meta_str(o, "uid") == Some(uid))
        })
    }

    /// Advances terminating namespaces and CRDs: deletes their content, then drops their
    /// finalizers once nothing remains.
    pub fn reconcile(&mut self) {
        for _ in 0..8 {
            let mut changed = false;
            let ns_res: ResKey = (String::new(), "namespaces".into());
            let terminating: Vec<String> = self
                .store
                .list(&ns_res, None)
                .into_iter()
                .filter(|(_, o)| meta(o).get("deletionTimestamp").is_some())
                .map(|(k, _)| k.1)
                .collect();
            for ns in terminating {
                changed |= self.finalize_namespace(&ns);
            }
            let crd_res: ResKey = (
                "apiextensions.k8s.io".into(),
                "customresourcedefinitions".into(),
            );
            let crds: Vec<Arc<Value>> = self
                .store
                .list(&crd_res, None)
                .into_iter()
                .filter(|(_, o)| {
                    meta(o).get("deletionTimestamp").is_some()
                        && finalizers(o).iter().any(|f| f == CRD_CLEANUP_FINALIZER)
                })
                .map(|(_, o)| o)
                .collect();
            for crd in crds {
                changed |= self.finalize_crd(&crd);
            }
            if !changed {
                break;
            }
        }
    }
}
