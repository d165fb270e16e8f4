//! The simulated kubelet's container logs: the lines of each container instance of a Pod,
//! with their timestamps, as `GET .../pods/{name}/log` serves them. Tests write the lines
//! ([`FakeApiServer::append_log`](crate::FakeApiServer::append_log)), restart containers
//! (a new instance; the old one is `previous`), and drop the follow streams (a clean end
//! while the container still runs, as after a kubelet's log rotation or a proxy timeout).

use std::collections::HashMap;
use std::sync::Mutex;

use jiff::Timestamp;
use tokio::sync::watch;

use crate::apiserver::sync::lock;

/// A container of a Pod: (namespace, pod name, container name).
pub type ContainerKey = (String, String, String);

/// One container instance's log.
#[derive(Debug, Clone, Default)]
pub struct Instance {
    /// The instance: the container's restart count when it started.
    pub restart: u32,
    /// Its lines, in order, with the kubelet's timestamps (never decreasing).
    pub lines: Vec<(Timestamp, String)>,
}

/// Where a follow stream is: which instance, how far, and the drop generation it started in.
#[derive(Debug, Clone, Copy)]
pub struct Cursor {
    /// The instance followed.
    pub restart: u32,
    /// Lines already sent.
    pub sent: usize,
    /// How many times the streams had been dropped when this one started.
    pub drops: u64,
}

/// What a follow stream gets next.
#[derive(Debug)]
pub enum Next {
    /// Lines to send.
    Lines(Vec<(Timestamp, String)>),
    /// Nothing yet: wait for a change.
    Wait,
    /// The stream ends (the instance was replaced, or the streams were dropped).
    End,
}

#[derive(Debug, Default)]
struct Logs {
    current: HashMap<ContainerKey, Instance>,
    previous: HashMap<ContainerKey, Instance>,
    drops: u64,
    /// Containers that have exited (until they restart): their follow streams end.
    terminated: std::collections::HashSet<ContainerKey>,
}

/// The logs of every container, and a signal for the follow streams.
#[derive(Debug)]
pub struct Kubelet {
    logs: Mutex<Logs>,
    changed: watch::Sender<u64>,
}

impl Default for Kubelet {
    fn default() -> Self {
        Kubelet {
            logs: Mutex::default(),
            changed: watch::channel(0).0,
        }
    }
}

impl Kubelet {
    fn bump(&self) {
        self.changed.send_modify(|g| *g = g.wrapping_add(1));
    }

    /// Appends lines to the container's current instance (each `\n`-free), stamped now.
    pub fn append(&self, key: &ContainerKey, lines: &[&str]) {
        {
            let mut logs = lock(&self.logs);
            let instance = logs.current.entry(key.clone()).or_default();
            for line in lines {
                // Never before the previous line (the clock may be coarse).
                let now = Timestamp::now();
                let at = instance
                    .lines
                    .last()
                    .map_or(now, |(last, _)| now.max(*last));
                instance.lines.push((at, (*line).to_string()));
            }
        }
        self.bump();
    }

    /// Replaces the container's instance with a new, empty one (its restart count + 1); the
    /// old one becomes `previous`. Returns the new restart count.
    pub fn restart(&self, key: &ContainerKey) -> u32 {
        let restart = {
            let mut logs = lock(&self.logs);
            let old = logs.current.remove(key).unwrap_or_default();
            let restart = old.restart + 1;
            logs.terminated.remove(key);
            logs.previous.insert(key.clone(), old);
            logs.current.insert(
                key.clone(),
                Instance {
                    restart,
                    lines: Vec::new(),
                },
            );
            restart
        };
        self.bump();
        restart
    }

    /// The container exits: its follow streams end, and new ones end after its lines
    /// (until it restarts).
    pub fn terminate(&self, key: &ContainerKey) {
        lock(&self.logs).terminated.insert(key.clone());
        self.bump();
    }

    /// Ends every open follow stream (the containers keep running).
    pub fn drop_streams(&self) {
        lock(&self.logs).drops += 1;
        self.bump();
    }

    /// Forgets the logs of a Pod's containers (the Pod is gone).
    pub fn forget_pod(&self, namespace: &str, pod: &str) {
        {
            let mut logs = lock(&self.logs);
            let gone = |k: &ContainerKey| k.0 == namespace && k.1 == pod;
            logs.current.retain(|k, _| !gone(k));
            logs.previous.retain(|k, _| !gone(k));
            logs.terminated.retain(|k| !gone(k));
        }
        self.bump();
    }

    /// The current (or previous) instance's lines at or after `since`, and a cursor after
    /// them for a follow stream.
    pub fn read(
        &self,
        key: &ContainerKey,
        previous: bool,
        since: Option<Timestamp>,
    ) -> (Vec<(Timestamp, String)>, Cursor) {
        let logs = lock(&self.logs);
        let source = if previous {
            &logs.previous
        } else {
            &logs.current
        };
        let instance = source.get(key).cloned().unwrap_or_default();
        let cursor = Cursor {
            restart: instance.restart,
            sent: instance.lines.len(),
            drops: logs.drops,
        };
        let lines = instance
            .lines
            .into_iter()
            .filter(|(at, _)| since.is_none_or(|s| *at >= s))
            .collect();
        (lines, cursor)
    }

    /// What a follow stream at `cursor` gets next (and moves the cursor).
    pub fn next(&self, key: &ContainerKey, cursor: &mut Cursor) -> Next {
        let logs = lock(&self.logs);
        if logs.drops != cursor.drops || logs.terminated.contains(key) {
            return Next::End;
        }
        let Some(instance) = logs.current.get(key) else {
            // Nothing written yet: the container runs, silent.
            return Next::Wait;
        };
        if instance.restart != cursor.restart {
            return Next::End;
        }
        if instance.lines.len() > cursor.sent {
            let lines = instance.lines[cursor.sent..].to_vec();
            cursor.sent = instance.lines.len();
            return Next::Lines(lines);
        }
        Next::Wait
    }

    /// A receiver woken at every change (appends, restarts, drops).
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// The container's current restart count (0 before any restart).
    pub fn restart_count(&self, key: &ContainerKey) -> u32 {
        lock(&self.logs).current.get(key).map_or(0, |i| i.restart)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> ContainerKey {
        ("ns".into(), "pod".into(), "main".into())
    }

    #[test]
    fn a_follower_gets_new_lines_then_ends_at_a_restart_or_a_drop() {
        let k = Kubelet::default();
        k.append(&key(), &["a", "b"]);
        let (lines, mut cursor) = k.read(&key(), false, None);
        assert_eq!(lines.len(), 2);
        assert!(matches!(k.next(&key(), &mut cursor), Next::Wait));
        k.append(&key(), &["c"]);
        match k.next(&key(), &mut cursor) {
            Next::Lines(l) => assert_eq!(l[0].1, "c"),
            other => panic!("{other:?}"),
        }
        assert_eq!(k.restart(&key()), 1);
        assert!(matches!(k.next(&key(), &mut cursor), Next::End));
        let (previous, _) = k.read(&key(), true, None);
        assert_eq!(previous.len(), 3, "the old instance is `previous`");
        let (_, mut cursor) = k.read(&key(), false, None);
        k.drop_streams();
        assert!(matches!(k.next(&key(), &mut cursor), Next::End));
    }

    #[test]
    fn since_keeps_the_lines_at_or_after_it() {
        let k = Kubelet::default();
        k.append(&key(), &["a", "b", "c"]);
        let (all, _) = k.read(&key(), false, None);
        let (from_b, _) = k.read(&key(), false, Some(all[1].0));
        // (Lines of the same instant as `b` come too: since is "at or after".)
        assert!(from_b.iter().any(|l| l.1 == "b"), "{from_b:?}");
        assert_eq!(from_b.last().map(|l| l.1.as_str()), Some("c"));
        assert!(all.windows(2).all(|w| w[0].0 <= w[1].0));
    }
}
