//! Sharding by hash ranges: which objects this replica serves. The uid of an object is
//! hashed (FNV-1a, 64 bits: Kubernetes' KEP-5866 `shardRange(object.metadata.uid, …)`);
//! the hash space is cut into `count` equal ranges; a replica serves the objects of the
//! ranges it holds (the [`Scope`]). The scope is controlled by whoever assigns the ranges
//! (kopf-peering's shard leases, [`ScopeControl`]) and observed by the engines, which
//! restart their watches when it changes and acknowledge once the objects of the ranges
//! they lost are no longer processed ([`ScopeObserver::ack`]): a range is handed over only
//! after that.
//!
//! ```
//! use kopf_core::shards::{Scope, range_of, selector};
//!
//! let scope = Scope::new(4, [0, 2]);
//! let uid = "3f7c1a52-9d7e-4c1b-8e55-0a1b2c3d4e5f";
//! assert_eq!(scope.owns(uid), [0, 2].contains(&range_of(uid, 4)));
//! assert_eq!(
//!     selector(&scope),
//!     "shardRange(object.metadata.uid, '0x0000000000000000', '0x4000000000000000') || \
//!      shardRange(object.metadata.uid, '0x8000000000000000', '0xc000000000000000')"
//! );
//! ```

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use tokio::sync::watch;

/// FNV-1a, 64 bits, of `bytes` (the hash of KEP-5866's shard ranges).
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        hash ^= u64::from(*b);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

/// The start (inclusive) and end (exclusive) of range `index` of `count`, as 65-bit
/// numbers (the last range ends at 2^64).
pub fn bounds(index: u32, count: u32) -> (u128, u128) {
    let count = u128::from(count.max(1));
    let span = 1u128 << 64;
    (
        span * u128::from(index) / count,
        span * (u128::from(index) + 1) / count,
    )
}

/// The range of `count` that the object with this uid falls in.
pub fn range_of(uid: &str, count: u32) -> u32 {
    let count = count.max(1);
    let hash = u128::from(fnv1a64(uid.as_bytes()));
    // The largest index whose start is not above the hash.
    ((hash * u128::from(count)) >> 64) as u32
}

/// The ranges a replica serves: `held` of `count`, and the epoch of this assignment (it
/// grows with every change).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Scope {
    /// How many ranges the hash space is cut into.
    pub count: u32,
    /// The ranges held.
    pub held: BTreeSet<u32>,
    /// Grows with every change of `held`.
    pub epoch: u64,
}

impl Scope {
    /// A scope of `count` ranges holding these.
    pub fn new(count: u32, held: impl IntoIterator<Item = u32>) -> Scope {
        Scope {
            count: count.max(1),
            held: held.into_iter().collect(),
            epoch: 0,
        }
    }

    /// Whether the object with this uid is served here.
    pub fn owns(&self, uid: &str) -> bool {
        self.held.contains(&range_of(uid, self.count))
    }
}

/// The `shardSelector` of a scope (KEP-5866): its ranges joined with `||`; empty when it
/// holds none.
pub fn selector(scope: &Scope) -> String {
    let hex = |n: u128| {
        if n >> 64 != 0 {
            "0x10000000000000000".to_string()
        } else {
            format!("0x{n:016x}")
        }
    };
    scope
        .held
        .iter()
        .map(|&i| {
            let (start, end) = bounds(i, scope.count);
            format!(
                "shardRange(object.metadata.uid, '{}', '{}')",
                hex(start),
                hex(end)
            )
        })
        .collect::<Vec<_>>()
        .join(" || ")
}

#[derive(Debug, Default)]
struct Acks {
    /// Per registered observer: the last epoch it has fully adopted.
    adopted: Mutex<HashMap<u64, u64>>,
    next_id: std::sync::atomic::AtomicU64,
}

/// The controlling side of a scope (whoever assigns the ranges).
#[derive(Clone, Debug)]
pub struct ScopeControl {
    tx: Arc<watch::Sender<Scope>>,
    acks: Arc<Acks>,
    adopted: Arc<watch::Sender<()>>,
}

/// An engine's view of the scope: the ranges now, their changes, and the acknowledgement
/// that a change is adopted. Registered while it lives.
#[derive(Debug)]
pub struct ScopeObserver {
    rx: watch::Receiver<Scope>,
    acks: Arc<Acks>,
    adopted: Arc<watch::Sender<()>>,
    id: u64,
}

impl ScopeControl {
    /// A scope of `count` ranges, holding none yet.
    pub fn new(count: u32) -> ScopeControl {
        let (tx, _) = watch::channel(Scope::new(count, []));
        let (adopted, _) = watch::channel(());
        ScopeControl {
            tx: Arc::new(tx),
            acks: Arc::default(),
            adopted: Arc::new(adopted),
        }
    }

    /// The scope now.
    pub fn scope(&self) -> Scope {
        self.tx.borrow().clone()
    }

    /// Holds these ranges from now on; the new epoch (the same when nothing changed).
    pub fn set(&self, held: BTreeSet<u32>) -> u64 {
        let mut epoch = 0;
        self.tx.send_if_modified(|scope| {
            epoch = scope.epoch;
            if scope.held == held {
                return false;
            }
            scope.held = held;
            scope.epoch += 1;
            epoch = scope.epoch;
            true
        });
        epoch
    }

    /// A new observer (an engine), registered until dropped.
    pub fn observer(&self) -> ScopeObserver {
        let id = self
            .acks
            .next_id
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let rx = self.tx.subscribe();
        // A new observer starts with the current scope adopted: it has processed nothing.
        self.acks
            .adopted
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id, rx.borrow().epoch);
        ScopeObserver {
            rx,
            acks: self.acks.clone(),
            adopted: self.adopted.clone(),
            id,
        }
    }

    /// Whether every observer has adopted `epoch` (or a later one).
    pub fn is_adopted(&self, epoch: u64) -> bool {
        self.acks
            .adopted
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .all(|&e| e >= epoch)
    }

    /// Waits until every observer has adopted `epoch` (or a later one): the objects of
    /// the ranges given up by then are processed nowhere here.
    pub async fn adopted(&self, epoch: u64) {
        let mut changes = self.adopted.subscribe();
        loop {
            if self.is_adopted(epoch) {
                return;
            }
            if changes.changed().await.is_err() {
                return;
            }
        }
    }
}

impl ScopeObserver {
    /// The scope now.
    pub fn scope(&self) -> Scope {
        self.rx.borrow().clone()
    }

    /// A receiver of the scope's changes (the scope as it is when read).
    pub fn receiver(&self) -> watch::Receiver<Scope> {
        self.rx.clone()
    }

    /// Waits for the next change of the scope; false when its control is gone.
    pub async fn changed(&mut self) -> bool {
        self.rx.changed().await.is_ok()
    }

    /// The change to `epoch` is adopted: no object outside its ranges is processed here
    /// any more.
    pub fn ack(&self, epoch: u64) {
        self.acks
            .adopted
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(self.id, epoch);
        self.adopted.send_replace(());
    }
}

impl Clone for ScopeObserver {
    fn clone(&self) -> Self {
        let id = self
            .acks
            .next_id
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let epoch = self
            .acks
            .adopted
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&self.id)
            .copied()
            .unwrap_or_default();
        self.acks
            .adopted
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id, epoch);
        ScopeObserver {
            rx: self.rx.clone(),
            acks: self.acks.clone(),
            adopted: self.adopted.clone(),
            id,
        }
    }
}

impl Drop for ScopeObserver {
    fn drop(&mut self) {
        self.acks
            .adopted
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.id);
        self.adopted.send_replace(());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn fnv1a_is_keps() {
        assert_eq!(fnv1a64(b""), 0xcbf29ce484222325);
        assert_eq!(fnv1a64(b"a"), 0xaf63dc4c8601ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x85944171f73967e8);
    }

    #[test]
    fn ranges_cover_the_hash_space_once() {
        for count in [1, 2, 3, 7] {
            let mut end = 0;
            for i in 0..count {
                let (s, e) = bounds(i, count);
                assert_eq!(s, end);
                end = e;
            }
            assert_eq!(end, 1u128 << 64);
            for n in 0..200 {
                let uid = format!("uid-{n}");
                let hash = u128::from(fnv1a64(uid.as_bytes()));
                let i = range_of(&uid, count);
                let (s, e) = bounds(i, count);
                assert!(s <= hash && hash < e, "{uid} in {i} of {count}");
            }
        }
        let scope = Scope::new(1, [0]);
        assert_eq!(
            selector(&scope),
            "shardRange(object.metadata.uid, '0x0000000000000000', '0x10000000000000000')"
        );
        assert_eq!(selector(&Scope::new(3, [])), "");
    }

    #[tokio::test]
    async fn a_change_is_adopted_when_every_observer_acknowledges_it() {
        let control = ScopeControl::new(2);
        let mut a = control.observer();
        let b = control.observer();
        let epoch = control.set([0, 1].into());
        assert_eq!(control.set([0, 1].into()), epoch, "no change, same epoch");
        assert!(a.changed().await);
        let waiting = {
            let control = control.clone();
            tokio::spawn(async move { control.adopted(epoch).await })
        };
        a.ack(epoch);
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiting.is_finished(), "b has not adopted it");
        drop(b);
        tokio::time::timeout(Duration::from_secs(1), waiting)
            .await
            .expect("adopted once b is gone")
            .expect("joined");
    }
}
