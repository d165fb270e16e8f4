//! What people do to a peering by hand (Kopf's `freeze` and `resume` commands, and `peers`):
//! write an entry that pauses the operators of lower (and the same) priority for a while,
//! remove it, and list who is in the peering.

use std::time::Duration;

use serde_json::Value;

use crate::error::PeeringError;
use crate::peer::{Peer, WireEntry, entry_patch};
use crate::peering::{api, patch};
use crate::settings::PeeringSettings;

fn failed(
    settings: &PeeringSettings,
    action: &'static str,
) -> impl FnOnce(kube::Error) -> PeeringError {
    let name = settings.name.clone();
    move |source| PeeringError::Api {
        name,
        action,
        source,
    }
}

/// Kopf's `freeze`: an entry of `settings.identity` (by Kopf's convention the person's
/// `user@host`, [`manual_identity`](crate::manual_identity)) with `settings.priority` and
/// `lifetime`: operators of lower priority pause until it expires (and those of the same
/// priority too, by Kopf's rule).
pub async fn freeze(
    client: &kube::Client,
    settings: &PeeringSettings,
    lifetime: Duration,
) -> Result<(), PeeringError> {
    let entry = Peer {
        identity: settings.identity.clone(),
        priority: settings.priority,
        lifetime,
        lastseen: kopf_core::clock::now(),
    }
    .wire_entry();
    write(client, settings, Some(entry)).await
}

/// Kopf's `resume`: the entry of `settings.identity` removed.
pub async fn resume(client: &kube::Client, settings: &PeeringSettings) -> Result<(), PeeringError> {
    write(client, settings, None).await
}

async fn write(
    client: &kube::Client,
    settings: &PeeringSettings,
    entry: Option<WireEntry>,
) -> Result<(), PeeringError> {
    patch(client, settings, entry_patch(&settings.identity, entry))
        .await
        .map_err(failed(settings, "writing the entry"))
}

/// One entry of a peering, as `peers` lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct Listed {
    /// The entry's key.
    pub identity: String,
    /// The peer, or why its entry cannot be read.
    pub peer: Result<Peer, String>,
    /// Alive by Kopf's rule now.
    pub alive: bool,
}

/// The entries of a peering object, by priority (highest first) then identity.
pub async fn peers(
    client: &kube::Client,
    settings: &PeeringSettings,
) -> Result<Vec<Listed>, PeeringError> {
    let object = api(client, settings)
        .get(&settings.name)
        .await
        .map_err(failed(settings, "reading the peering object"))?;
    let now = kopf_core::clock::now();
    let mut out: Vec<Listed> = object
        .data
        .get("status")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter(|(_, v)| !v.is_null())
        .map(|(id, v)| {
            let peer = Peer::parse(id, v, now).map_err(|e| e.to_string());
            let alive = peer.as_ref().is_ok_and(|p| p.is_alive(now));
            Listed {
                identity: id.clone(),
                peer,
                alive,
            }
        })
        .collect();
    out.sort_by_key(|l| {
        (
            std::cmp::Reverse(l.peer.as_ref().map(|p| p.priority).unwrap_or(i64::MIN)),
            l.identity.clone(),
        )
    });
    Ok(out)
}
