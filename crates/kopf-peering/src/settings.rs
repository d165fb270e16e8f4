//! How an operator takes part in peering ([`PeeringSettings`]), and its identity among peers.

use std::time::Duration;

use crate::peer::DEFAULT_LIFETIME;

/// Whether the operator uses peering.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PeeringMode {
    /// Kopf's default: peering when the cluster has the peering resources, standalone when
    /// it has not.
    #[default]
    Auto,
    /// Peering required (Kopf's `--peering NAME`): the operator stays paused until the
    /// peering resource and object exist.
    Mandatory,
    /// No peering (`--standalone`).
    Standalone,
}

/// What the operator does about live peers with its own priority.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SamePriority {
    /// Kopf's rule: all of them pause (they would process the same objects).
    #[default]
    PauseAll,
    /// They do not pause (Kopf 1.45 when the operators shard their objects; leader election).
    Ignore,
}

/// How an operator takes part in peering.
///
/// ```
/// use kopf_peering::{PeeringMode, PeeringSettings};
///
/// let settings = PeeringSettings::default().priority(100).namespace("ops");
/// assert_eq!(settings.mode, PeeringMode::Auto);
/// assert_eq!(settings.name, "default");
/// assert_eq!(settings.namespace.as_deref(), Some("ops"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeeringSettings {
    /// Auto, mandatory or standalone.
    pub mode: PeeringMode,
    /// The peering object's name (`default`).
    pub name: String,
    /// `None`: the cluster-wide `ClusterKopfPeering`; a namespace: the `KopfPeering` there.
    pub namespace: Option<String>,
    /// This operator's priority (`0`; Kopf's `--dev` is 666).
    pub priority: i64,
    /// How long this operator's entry is valid after each keep-alive (60 s).
    pub lifetime: Duration,
    /// Keep-alives are not logged.
    pub stealth: bool,
    /// What to do about live peers with the same priority.
    pub same_priority: SamePriority,
    /// This operator's identity: the key of its entry.
    pub identity: String,
}

impl Default for PeeringSettings {
    fn default() -> Self {
        PeeringSettings {
            mode: PeeringMode::Auto,
            name: "default".into(),
            namespace: None,
            priority: 0,
            lifetime: DEFAULT_LIFETIME,
            stealth: false,
            same_priority: SamePriority::PauseAll,
            identity: identity(),
        }
    }
}

impl PeeringSettings {
    /// The mode.
    pub fn mode(mut self, mode: PeeringMode) -> Self {
        self.mode = mode;
        self
    }

    /// The peering object's name.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// The namespace of a `KopfPeering` (instead of the cluster-wide `ClusterKopfPeering`).
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = Some(namespace.into());
        self
    }

    /// The priority.
    pub fn priority(mut self, priority: i64) -> Self {
        self.priority = priority;
        self
    }

    /// The lifetime of this operator's entry (whole seconds on the wire, at least 1 s).
    pub fn lifetime(mut self, lifetime: Duration) -> Self {
        self.lifetime = lifetime.max(Duration::from_secs(1));
        self
    }

    /// Whether keep-alives are logged.
    pub fn stealth(mut self, stealth: bool) -> Self {
        self.stealth = stealth;
        self
    }

    /// What to do about live peers with the same priority.
    pub fn same_priority(mut self, rule: SamePriority) -> Self {
        self.same_priority = rule;
        self
    }

    /// The identity (by default [`identity()`]).
    pub fn identity(mut self, identity: impl Into<String>) -> Self {
        self.identity = identity.into();
        self
    }
}

/// This process's identity among peers, as Kopf forms it: `$POD_ID` when set (the pod's
/// name, from the downward API), else `<user>@<host>/<YYYYmmddHHMMSS>/<3 random characters>`.
pub fn identity() -> String {
    identity_with(std::env::var("POD_ID").ok())
}

/// [`identity()`] with the pod's name given.
fn identity_with(pod: Option<String>) -> String {
    if let Some(pod) = pod {
        return pod;
    }
    let now = jiff::Timestamp::now().strftime("%Y%m%d%H%M%S").to_string();
    // Kopf's alphabet (it has no `g`).
    const ALPHABET: &[u8] = b"abcdefhijklmnopqrstuvwxyz0123456789";
    let rnd: String = (0..3)
        .map(|_| ALPHABET[rand::random_range(0..ALPHABET.len())] as char)
        .collect();
    format!("{}/{now}/{rnd}", manual_identity())
}

/// The identity of a person's commands (`kopf freeze`, `kopf resume`): `<user>@<host>`.
pub fn manual_identity() -> String {
    let user = std::env::var("USER")
        .or_else(|_| std::env::var("LOGNAME"))
        .unwrap_or_else(|_| "unknown".into());
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "localhost".into());
    format!("{user}@{host}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identities_look_like_kopfs() {
        assert_eq!(identity_with(Some("pod-1".into())), "pod-1");
        let id = identity_with(None);
        let parts: Vec<&str> = id.split('/').collect();
        assert_eq!(parts.len(), 3, "{id}");
        assert_eq!(parts[0], manual_identity());
        assert!(parts[0].contains('@'), "{id}");
        assert_eq!(parts[1].len(), 14, "{id}");
        assert!(parts[1].chars().all(|c| c.is_ascii_digit()), "{id}");
        assert_eq!(parts[2].len(), 3, "{id}");
        assert!(!parts[2].contains('g'), "{id}");
    }
}
