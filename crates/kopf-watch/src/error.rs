//! The errors of watching ([`WatchError`]): a leaf of the crate's vocabulary.

/// Errors of watching.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    /// Discovery failed.
    #[error(
        "cannot discover the API server's resources (is it reachable at the kubeconfig's server URL?): {0}"
    )]
    Discovery(#[source] kube::Error),
    /// The selector names no served resource.
    #[error(
        "no served resource matches {}{hint}; is its CustomResourceDefinition applied? (kubectl get crd)",
        // A name in quotes; ("group", "version", "plural") as it is.
        if .selector.starts_with('(') { .selector.clone() } else { format!("{:?}", .selector) }
    )]
    UnknownResource {
        /// The selector.
        selector: String,
        /// Similar names, if any.
        hint: String,
    },
    /// The selector names several resources.
    #[error("{selector:?} is ambiguous: it matches {choices}; use plural.group to pick one")]
    Ambiguous {
        /// The selector.
        selector: String,
        /// The matches.
        choices: String,
    },
    /// The API server forbids listing the resource (403): the operator's account lacks
    /// RBAC permissions.
    #[error(
        "the API server forbids listing {resource} (403: {message}); grant the operator's account list, watch and patch on it (the operator's `rbac` command prints the manifests it needs)"
    )]
    Forbidden {
        /// `plural.group`.
        resource: String,
        /// The API server's message.
        message: String,
    },
    /// A declared condition of a resource is invalid.
    #[error(
        "the conditions declared for {resource} are invalid: {error}; fix the declaration (Operator::conditions)"
    )]
    InvalidConditions {
        /// `plural.group`.
        resource: String,
        /// What is wrong.
        #[source]
        error: Box<kopf_core::conditions::ConditionError>,
    },
    /// More than one reconcile is registered for one resource.
    #[error(
        "{resource} has {count} reconciles ({ids}); a resource has at most one: merge them into one function, or give the others to cause handlers"
    )]
    SeveralReconciles {
        /// `plural.group`.
        resource: String,
        /// How many.
        count: usize,
        /// Their ids.
        ids: String,
    },
    /// A selector of the settings (`run -l`, `--field-selector`) is not valid.
    #[error("the {option} {selector:?} is not valid: {reason}")]
    InvalidSelector {
        /// Which selector, with its option.
        option: &'static str,
        /// The selector as given.
        selector: Box<str>,
        /// What is wrong.
        reason: Box<str>,
    },
    /// A resource declared metadata-only has something that needs more than metadata.
    #[error("{resource} cannot be watched metadata-only: {reason}")]
    MetadataOnly {
        /// `plural.group`.
        resource: String,
        /// What needs more.
        reason: Box<str>,
    },
    /// The resource cannot be watched.
    #[error("{resource} cannot be served: it lacks the {verb:?} verb")]
    MissingVerb {
        /// The resource.
        resource: String,
        /// The missing verb.
        verb: String,
    },
}
