//! The CustomResourceDefinitions an operator owns: declared from kube's
//! `#[derive(CustomResource)]` types (or given as objects), printed by the `crd` command,
//! and applied to the embedded API server of `run --fake` and `rbac` before anything else.

use kube::core::crd::CustomResourceExt;
use serde_json::{Value, json};

use crate::cli;
use crate::error::Error;
use crate::operator::Operator;

impl Operator {
    /// Declares a CRD the operator owns, from a `#[derive(CustomResource)]` type: `crd`
    /// prints it, and `run --fake` (and `rbac`) apply it to their embedded API server with
    /// no `--apply`. (`examples/my-operator` is a crate that does it; with kube's `derive`
    /// feature:)
    ///
    /// ```text
    /// #[derive(CustomResource, Deserialize, Serialize, Clone, Debug, JsonSchema)]
    /// #[kube(group = "example.com", version = "v1", kind = "Greeting", namespaced)]
    /// pub struct GreetingSpec { pub name: String }
    ///
    /// let operator = kopf::Operator::new()
    ///     .crd::<Greeting>()
    ///     .on_create(kopf::Selector::of::<Greeting>(), "greet_fn", greet_fn);
    /// ```
    pub fn crd<K: CustomResourceExt>(self) -> Self {
        match serde_json::to_value(K::crd()) {
            Ok(crd) => self.crd_manifest(crd),
            // A CRD built by kube's derive is plain data: it always serializes.
            Err(e) => {
                tracing::error!("The CRD of {} cannot be serialized: {e}", K::crd_name());
                self
            }
        }
    }

    /// Declares a CRD the operator owns, as an object (for CRDs not generated from a type;
    /// see [`crd`](Self::crd)). A CRD of the same name replaces the one declared before.
    ///
    /// ```
    /// let crd = serde_json::json!({
    ///     "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    ///     "metadata": {"name": "greetings.example.com"},
    /// });
    /// let operator = kopf::Operator::new().crd_manifest(crd);
    /// assert_eq!(operator.crds().len(), 1);
    /// ```
    pub fn crd_manifest(mut self, crd: Value) -> Self {
        let name = |c: &Value| c.pointer("/metadata/name").cloned();
        self.crds.retain(|c| name(c) != name(&crd));
        self.crds.push(crd);
        self
    }

    /// The declared CRDs (see [`crd`](Self::crd)), in their order.
    pub fn crds(&self) -> &[Value] {
        &self.crds
    }

    /// `crd`: prints the declared CRDs (YAML documents, or a JSON `List`).
    pub(crate) fn print_crds(&self, args: &cli::CrdArgs) -> Result<(), Error> {
        use std::io::Write;
        let text = crds_text(&self.crds, args.output)?;
        std::io::stdout()
            .write_all(text.as_bytes())
            .map_err(Error::Output)
    }

    /// Applies the declared CRDs to an embedded API server (before any manifest: objects
    /// of those resources may follow).
    #[cfg(feature = "testing")]
    pub(crate) fn apply_crds(&self, server: &kopf_testing::FakeApiServer) -> Result<(), Error> {
        for crd in &self.crds {
            server.apply_object(crd.clone()).map_err(|reason| {
                Error::Config(format!(
                    "the embedded API server refused the CRD {}: {reason}",
                    crd.pointer("/metadata/name")
                        .and_then(Value::as_str)
                        .unwrap_or("(no name)")
                ))
            })?;
        }
        if !self.crds.is_empty() {
            tracing::info!("applied the operator's {} CRD(s)", self.crds.len());
        }
        Ok(())
    }
}

/// The CRDs as the `crd` command prints them.
fn crds_text(crds: &[Value], output: cli::CrdOutput) -> Result<String, Error> {
    if crds.is_empty() {
        return Err(Error::Config(
            "this operator declares no CRDs: declare the ones it owns with `Operator::crd::<MyResource>()` (a #[derive(CustomResource)] type) or `Operator::crd_manifest(...)`".into(),
        ));
    }
    let failed = |e: &dyn std::fmt::Display| Error::Config(format!("cannot write the CRDs: {e}"));
    match output {
        cli::CrdOutput::Json => {
            let list = json!({"apiVersion": "v1", "kind": "List", "items": crds});
            serde_json::to_string_pretty(&list)
                .map(|text| text + "\n")
                .map_err(|e| failed(&e))
        }
        cli::CrdOutput::Yaml => {
            let mut out = String::new();
            for crd in crds {
                out.push_str("---\n");
                out.push_str(&serde_saphyr::to_string(crd).map_err(|e| failed(&e))?);
            }
            Ok(out)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crd(name: &str, version: &str) -> Value {
        json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
               "metadata": {"name": name}, "spec": {"versions": [{"name": version}]}})
    }

    #[test]
    fn declared_crds_are_printed_once_each() {
        let operator = Operator::new()
            .crd_manifest(crd("as.example.com", "v1"))
            .crd_manifest(crd("bs.example.com", "v1"))
            .crd_manifest(crd("as.example.com", "v2"));
        assert_eq!(operator.crds().len(), 2, "the same name replaces");
        let yaml = crds_text(operator.crds(), cli::CrdOutput::Yaml).expect("yaml");
        assert_eq!(yaml.matches("---\n").count(), 2, "{yaml}");
        assert!(
            yaml.contains("name: v2") && !yaml.contains("name: v1\n  "),
            "{yaml}"
        );
        let json: Value =
            serde_json::from_str(&crds_text(operator.crds(), cli::CrdOutput::Json).expect("json"))
                .expect("parses");
        assert_eq!(json["items"][0]["metadata"]["name"], "bs.example.com");
        let none = crds_text(&[], cli::CrdOutput::Yaml).expect_err("none declared");
        assert!(
            none.to_string().contains("Operator::crd::<MyResource>()"),
            "{none}"
        );
    }
}
