//! The options of the commands that print or write manifests rather than run the
//! operator: `rbac` (and `rbac --verify`), `crd` and `olm`.

use std::path::PathBuf;

use clap::ValueEnum;

/// Options of `uninstall`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct UninstallArgs {
    /// Say what would be taken off, and write nothing.
    #[arg(long, env = "KOPF_UNINSTALL_DRY_RUN")]
    pub dry_run: bool,
    /// Only objects in this namespace (repeatable); cluster-scoped resources are always
    /// looked at. None given (from code: `UninstallArgs::default()`): every namespace.
    #[arg(
        short = 'n',
        long = "namespace",
        value_name = "NS",
        env = "KOPF_UNINSTALL_NAMESPACE",
        value_delimiter = ',',
        required_unless_present = "all_namespaces"
    )]
    pub namespaces: Vec<String>,
    /// Objects in every namespace.
    #[arg(
        short = 'A',
        long,
        env = "KOPF_UNINSTALL_ALL_NAMESPACES",
        conflicts_with = "namespaces"
    )]
    pub all_namespaces: bool,
}

/// Options of `rbac`.
#[derive(Debug, Clone, clap::Args)]
pub struct RbacArgs {
    /// The name of the ServiceAccount, ClusterRole and ClusterRoleBinding (default: the
    /// operator's own name, its Cargo package's or binary's, in lowercase with `-` for
    /// other characters).
    #[arg(long, env = "KOPF_RBAC_NAME")]
    pub name: Option<String>,
    /// The namespace of the ServiceAccount.
    #[arg(
        long = "account-namespace",
        env = "KOPF_RBAC_ACCOUNT_NAMESPACE",
        default_value = "default"
    )]
    pub account_namespace: String,
    /// Manifests with the CRDs of the operator's resources (default: the operator's own
    /// development manifests); resources are resolved against them on an embedded API
    /// server.
    #[arg(
        long = "apply",
        env = "KOPF_RBAC_APPLY",
        value_delimiter = ',',
        value_name = "FILE",
        conflicts_with = "cluster"
    )]
    pub apply: Vec<PathBuf>,
    /// Resolve the resources on the cluster of the current kubeconfig instead.
    #[arg(long, env = "KOPF_RBAC_CLUSTER")]
    pub cluster: bool,
    /// Add what `run --leader-election` needs: reading, creating and updating Leases
    /// (also added when the operator's code sets up leader election).
    #[arg(long, env = "KOPF_RBAC_LEADER_ELECTION")]
    pub leader_election: bool,
    /// Add what `run --shards` needs: listing, creating and updating Leases (also added when
    /// the operator's code sets up sharding).
    #[arg(long, env = "KOPF_RBAC_SHARDS")]
    pub shards: bool,
    /// Check on the cluster of the current kubeconfig that every permission the operator
    /// needs is granted (an access review per resource and verb): prints ✅/❌ per resource
    /// and verb and the missing rules as YAML; the exit status is non-zero when something
    /// is missing.
    #[arg(long, env = "KOPF_RBAC_VERIFY", conflicts_with = "apply")]
    pub verify: bool,
    /// With --verify: whose permissions, a user or a ServiceAccount as
    /// `system:serviceaccount:NAMESPACE:NAME` (default: the kubeconfig's own user). Needs
    /// the permission to create SubjectAccessReviews.
    #[arg(
        long = "as",
        env = "KOPF_RBAC_AS",
        value_name = "USER",
        requires = "verify"
    )]
    pub as_user: Option<String>,
    /// With --as: the user's groups (default: a ServiceAccount's own groups; always
    /// `system:authenticated`). Repeatable.
    #[arg(
        long = "as-group",
        env = "KOPF_RBAC_AS_GROUP",
        value_name = "GROUP",
        value_delimiter = ',',
        requires = "as_user"
    )]
    pub as_groups: Vec<String>,
    /// With --verify: check namespaced resources in these namespaces rather than
    /// cluster-wide (for an operator granted them by RoleBindings). Repeatable.
    #[arg(
        long = "namespace",
        short = 'n',
        env = "KOPF_RBAC_NAMESPACE",
        value_name = "NAMESPACE",
        value_delimiter = ',',
        requires = "verify"
    )]
    pub namespaces: Vec<String>,
}

/// Options of `olm`.
#[derive(Debug, Clone, clap::Args)]
pub struct OlmArgs {
    /// The operator's container image (`registry.example.com/my-operator:1.2.0`).
    #[arg(long, env = "KOPF_OLM_IMAGE")]
    pub image: String,
    /// Where to write the bundle (`manifests/`, `metadata/`).
    #[arg(long, env = "KOPF_OLM_DIR", default_value = "bundle")]
    pub dir: PathBuf,
    /// The bundle's version, SemVer (default: the operator's version, `Operator::about`).
    #[arg(
        long = "bundle-version",
        env = "KOPF_OLM_BUNDLE_VERSION",
        value_name = "X.Y.Z"
    )]
    pub bundle_version: Option<String>,
    /// The package name (default: the operator's name); also its ServiceAccount's.
    #[arg(long, env = "KOPF_OLM_PACKAGE")]
    pub package: Option<String>,
    /// The channel (and default channel).
    #[arg(long, env = "KOPF_OLM_CHANNEL", default_value = "alpha")]
    pub channel: String,
    /// Manifests with the CRDs (as for `rbac --apply`; default: the operator's development
    /// manifests); their CRDs go into the bundle besides the declared ones.
    #[arg(
        long = "apply",
        env = "KOPF_OLM_APPLY",
        value_delimiter = ',',
        value_name = "FILE",
        conflicts_with = "cluster"
    )]
    pub apply: Vec<PathBuf>,
    /// Resolve the resources on the cluster of the current kubeconfig.
    #[arg(long, env = "KOPF_OLM_CLUSTER")]
    pub cluster: bool,
}

impl RbacArgs {
    /// The options of `rbac` that make the rules of an OLM bundle.
    pub(crate) fn for_bundle(name: &str, apply: &[PathBuf], cluster: bool) -> Self {
        RbacArgs {
            name: Some(name.to_string()),
            account_namespace: "default".into(),
            apply: apply.to_vec(),
            cluster,
            leader_election: false,
            shards: false,
            verify: false,
            as_user: None,
            as_groups: Vec::new(),
            namespaces: Vec::new(),
        }
    }
}

/// Options of `crd`.
#[derive(Debug, Clone, clap::Args)]
pub struct CrdArgs {
    /// The output format: YAML documents (`---` between them) or a JSON `List`.
    #[arg(
        long,
        short = 'o',
        env = "KOPF_CRD_OUTPUT",
        value_enum,
        default_value = "yaml"
    )]
    pub output: CrdOutput,
}

/// Output formats of `crd`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CrdOutput {
    /// YAML documents.
    Yaml,
    /// One JSON `List`.
    Json,
}
