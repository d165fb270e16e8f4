//! `kopf freeze`, `kopf resume` and `kopf peers`: Kopf's peering commands. `freeze` writes an
//! entry that pauses the operators of lower (and, by Kopf's rule, the same) priority for a
//! while, `resume` removes it, `peers` lists who is in a peering and who is alive.

use std::time::Duration;

use anyhow::Context;
use kopf::peering::{self, PeeringSettings};

/// Where the peering is: the peering object and its scope.
#[derive(Debug, Clone, clap::Args)]
pub struct Where {
    /// The peering object's name.
    #[arg(long, short = 'P', value_name = "NAME")]
    pub peering: String,
    /// The `KopfPeering` in this namespace (default: the cluster-wide `ClusterKopfPeering`).
    #[arg(
        long,
        short = 'n',
        value_name = "NAMESPACE",
        conflicts_with = "all_namespaces"
    )]
    pub namespace: Option<String>,
    /// The cluster-wide `ClusterKopfPeering` (the default).
    #[arg(long, short = 'A')]
    pub all_namespaces: bool,
    /// The identity of the entry (default: USER@HOST, Kopf's for these commands).
    #[arg(long = "id", short = 'i', value_name = "ID")]
    pub identity: Option<String>,
}

impl Where {
    fn settings(&self) -> PeeringSettings {
        let mut settings = PeeringSettings::default().name(&self.peering).identity(
            self.identity
                .clone()
                .unwrap_or_else(peering::manual_identity),
        );
        settings.namespace = self.namespace.clone();
        settings
    }
}

/// `kopf freeze`.
#[derive(Debug, Clone, clap::Args)]
pub struct FreezeArgs {
    #[command(flatten)]
    pub place: Where,
    /// How long the freeze lasts (seconds).
    #[arg(long, short = 't', value_name = "SECONDS")]
    pub lifetime: u64,
    /// The freeze's priority: operators below it (and at it) pause.
    #[arg(
        long,
        short = 'p',
        default_value_t = 100,
        allow_negative_numbers = true
    )]
    pub priority: i64,
    /// Priority 666 (Kopf's development mode) unless --priority says otherwise.
    #[arg(long)]
    pub dev: bool,
    /// A message for the people who read the peering (accepted as Kopf does; not stored).
    #[arg(long, short = 'm')]
    pub message: Option<String>,
}

/// `kopf resume`.
#[derive(Debug, Clone, clap::Args)]
pub struct ResumeArgs {
    #[command(flatten)]
    pub place: Where,
}

/// `kopf peers`.
#[derive(Debug, Clone, clap::Args)]
pub struct PeersArgs {
    /// The peering object's name.
    #[arg(long, short = 'P', value_name = "NAME", default_value = "default")]
    pub peering: String,
    /// The `KopfPeering` in this namespace (default: the cluster-wide `ClusterKopfPeering`).
    #[arg(long, short = 'n', value_name = "NAMESPACE")]
    pub namespace: Option<String>,
}

async fn client() -> anyhow::Result<kube::Client> {
    let config = kopf::config::client_config(None, Duration::from_secs(70))
        .await
        .context("configuring the Kubernetes client")?;
    kube::Client::try_from(config).context("creating the Kubernetes client")
}

/// `kopf freeze`: the entry written; what it did, on stdout.
pub async fn freeze(args: FreezeArgs) -> anyhow::Result<()> {
    let mut settings = args.place.settings();
    settings.priority = if args.dev && args.priority == 100 {
        666
    } else {
        args.priority
    };
    let lifetime = Duration::from_secs(args.lifetime);
    peering::freeze(&client().await?, &settings, lifetime)
        .await
        .context("freezing")?;
    println!(
        "Frozen: operators below priority {} in the peering {:?} pause for {} s (entry {:?}).",
        settings.priority, settings.name, args.lifetime, settings.identity
    );
    Ok(())
}

/// `kopf resume`: the entry removed.
pub async fn resume(args: ResumeArgs) -> anyhow::Result<()> {
    let settings = args.place.settings();
    peering::resume(&client().await?, &settings)
        .await
        .context("resuming")?;
    println!(
        "Resumed: the entry {:?} is removed from the peering {:?}.",
        settings.identity, settings.name
    );
    Ok(())
}

/// `kopf peers`: the entries of a peering, highest priority first, with who is alive.
pub async fn peers(args: PeersArgs) -> anyhow::Result<()> {
    let mut settings = PeeringSettings::default().name(&args.peering);
    settings.namespace = args.namespace.clone();
    let listed = peering::peers(&client().await?, &settings)
        .await
        .context("listing the peers")?;
    println!("{}", table(&listed));
    Ok(())
}

/// The listing as a table.
fn table(listed: &[peering::Listed]) -> String {
    let mut rows = vec![[
        "IDENTITY".to_string(),
        "PRIORITY".into(),
        "LIFETIME".into(),
        "LASTSEEN".into(),
        "STATE".into(),
    ]];
    for l in listed {
        rows.push(match &l.peer {
            Ok(p) => [
                l.identity.clone(),
                p.priority.to_string(),
                format!("{}s", p.lifetime.as_secs()),
                peering::isoformat(p.lastseen),
                if l.alive { "alive" } else { "dead" }.into(),
            ],
            Err(why) => [
                l.identity.clone(),
                "?".into(),
                "?".into(),
                "?".into(),
                format!("unreadable: {why}"),
            ],
        });
    }
    let widths: Vec<usize> = (0..5)
        .map(|i| rows.iter().map(|r| r[i].len()).max().unwrap_or(0))
        .collect();
    rows.iter()
        .map(|r| {
            r.iter()
                .zip(&widths)
                .map(|(c, w)| format!("{c:<w$}"))
                .collect::<Vec<_>>()
                .join("  ")
                .trim_end()
                .to_string()
        })
        .collect::<Vec<_>>()
        .join("\n")
}
