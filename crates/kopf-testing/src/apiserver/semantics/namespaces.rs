//! Namespaces: the protected ones, creating only in active namespaces, and emptying a
//! terminating namespace before it goes.

use serde_json::{Value, json};

use crate::apiserver::catalog::ResourceDef;
use crate::apiserver::error::{ApiError, ApiResult};
use crate::apiserver::storage::{ObjKey, ResKey};

use super::meta::{finalizers, meta};
use super::options::DeleteOptions;
use super::state::State;

pub(super) const PROTECTED_NAMESPACES: &[&str] = &["default", "kube-system", "kube-public"];

impl State {
    pub(super) fn check_namespace_for_create(
        &self,
        def: &ResourceDef,
        namespace: &str,
        name: &str,
    ) -> ApiResult<()> {
        let ns = self
            .store
            .get(
                &(String::new(), "namespaces".into()),
                &(String::new(), namespace.into()),
            )
            .ok_or_else(|| ApiError::not_found("", "namespaces", namespace))?;
        if meta(&ns).get("deletionTimestamp").is_some() {
            let mut err = ApiError::forbidden(
                &def.group,
                &def.plural,
                name,
                &format!(
                    "unable to create new content in namespace {namespace} because it is being terminated"
                ),
            );
            if let Some(d) = err.details.as_mut() {
                d["causes"] = json!([{"reason": "NamespaceTerminating",
                    "message": format!("namespace {namespace} is being terminated"),
                    "field": "metadata.namespace"}]);
            }
            return Err(err);
        }
        Ok(())
    }

    pub(super) fn finalize_namespace(&mut self, ns: &str) -> bool {
        let mut changed = false;
        let namespaced: Vec<ResourceDef> = {
            let mut seen = std::collections::HashSet::new();
            self.defs()
                .into_iter()
                .filter(|d| d.namespaced && seen.insert(Self::res_key(d)))
                .cloned()
                .collect()
        };
        let mut remaining = 0;
        for def in &namespaced {
            for (key, obj) in self.store.list(&Self::res_key(def), Some(ns)) {
                remaining += 1;
                if meta(&obj).get("deletionTimestamp").is_none() {
                    let opts = DeleteOptions::default();
                    if let Err(e) = self.delete(def, Some(ns), &key.1, &opts) {
                        tracing::debug!(error = %e, "namespace cleanup could not delete an object");
                    }
                    changed = true;
                }
            }
        }
        if remaining > 0 && changed {
            return true;
        }
        let still: usize = namespaced
            .iter()
            .map(|d| self.store.list(&Self::res_key(d), Some(ns)).len())
            .sum();
        if still > 0 {
            return changed;
        }
        let res: ResKey = (String::new(), "namespaces".into());
        let key: ObjKey = (String::new(), ns.to_string());
        let Some(obj) = self.store.get(&res, &key) else {
            return changed;
        };
        let spec_fins = obj
            .pointer("/spec/finalizers")
            .and_then(Value::as_array)
            .is_some_and(|a| !a.is_empty());
        if spec_fins {
            let mut new = (*obj).clone();
            new["spec"]["finalizers"] = json!([]);
            self.store.put(&res, &key, new);
            changed = true;
        }
        if let Some(obj) = self.store.get(&res, &key)
            && finalizers(&obj).is_empty()
        {
            self.store.remove(&res, &key);
            changed = true;
        }
        changed
    }
}
