//! One level of handlers (the top-level ones of a cause, or one parent's sub-handlers), each
//! ready one through the per-handler [`Stack`](crate::layers::Stack), and the recursion into
//! the sub-handlers a handler registers: a parent succeeds only once they all have.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use serde_json::{Value, json};

use super::exec::{Exec, Level};
use super::select::{Base, pick, select};
use crate::cycle::HandlerOutcome;
use crate::events::EventSpec;
use crate::handler::spec::HandlerSpec;
use crate::layers::{Attempt, CallOutcome, HandlerCall, retrying};
use crate::progress::{ProgressRecord, format_time};

/// A boxed level: sub-handlers recurse into their own level.
type LevelFuture<'s> = Pin<Box<dyn Future<Output = Level> + Send + 's>>;

impl Exec<'_> {
    /// Runs the ready handlers of one level; sub-handlers recurse into their own level.
    pub(super) fn run_level<'s>(
        &'s mut self,
        handlers: Vec<HandlerSpec>,
        base: &'s Base,
    ) -> LevelFuture<'s> {
        Box::pin(self.level(handlers, base))
    }

    async fn level(&mut self, handlers: Vec<HandlerSpec>, base: &Base) -> Level {
        let now = self.now;
        let stored = self.stored_records(&handlers);
        // With a one-per-cycle lifecycle, only the picked ready handler runs now.
        let picked = pick(self.inner.persistence.lifecycle, &stored, now);
        let mut level = Level::new();
        for (index, (h, stored)) in handlers.iter().zip(stored).enumerate() {
            let record = stored.clone().unwrap_or_default();
            level.ids.push(h.id.clone());
            level.ids.extend(record.subrefs.clone().unwrap_or_default());
            if record.is_finished() {
                level.finished(&record);
            } else if !record.is_awake(now) {
                level.asleep(&record, now);
            } else if picked.is_some_and(|p| p != index) {
                // Not this cycle's handler: it runs in the next cycle, at once.
                level.wait(Duration::ZERO);
                if stored.is_none() {
                    let fresh = self.fresh_record();
                    self.records.push((h.id.clone(), fresh));
                }
            } else {
                self.run_one(h, record, base, &mut level).await;
            }
        }
        level.ids.sort();
        level.ids.dedup();
        level
    }

    /// The stored records of a level's handlers; records of another cause were purged as
    /// superseded (they start over), unreadable ones are reported and treated as absent.
    fn stored_records(&mut self, handlers: &[HandlerSpec]) -> Vec<Option<ProgressRecord>> {
        let progress = &self.inner.persistence.progress;
        let purpose = self.reason.purpose();
        let mut stored = Vec::with_capacity(handlers.len());
        for h in handlers {
            let record = match progress.fetch(&h.id, self.body) {
                Some(Ok(record)) => Some(record),
                Some(Err(e)) => {
                    self.out.corrupt_records.push(format!(
                        "The progress record of handler '{}' is not readable: {} is '{}' ({}); it is treated as absent.",
                        h.id, e.key, e.value, e.problem
                    ));
                    None
                }
                None => None,
            };
            stored.push(record.filter(|r| r.purpose.as_deref().is_none_or(|p| p == purpose)));
        }
        stored
    }

    /// One attempt of a ready handler through the stack (or its rejected result's), folded
    /// into the level and the cycle's outcome.
    async fn run_one(
        &mut self,
        h: &HandlerSpec,
        mut record: ProgressRecord,
        base: &Base,
        level: &mut Level,
    ) {
        record.started.get_or_insert_with(|| format_time(self.now));
        record.purpose = Some(self.reason.purpose().to_string());
        let hbase = base.for_handler(h);
        let call = HandlerCall {
            spec: h.clone(),
            cause: self.cause(&hbase, &record),
            record: record.clone(),
            now: self.now,
        };
        let attempt = match self.rejected.get(&h.id) {
            // Its last result was rejected by the API server: that was its attempt.
            Some(message) => self.inner.stack.reject(call, message.clone()).await,
            None => self.inner.stack.call(call).await,
        };
        let Attempt::Done {
            mut outcome,
            record: next,
            retry_in,
        } = attempt
        else {
            return;
        };
        record = next;
        self.out.events.append(&mut outcome.events);
        let result = std::mem::replace(&mut outcome.result, Ok(None));
        let result = match (result, retry_in) {
            (Ok(value), _) => {
                self.returned(h, value, outcome, &hbase, &mut record, level)
                    .await
            }
            (Err(e), Some(d)) => {
                level.wait(d);
                HandlerOutcome::Retrying {
                    message: e.to_string(),
                }
            }
            (Err(e), None) => {
                level.failed += 1;
                HandlerOutcome::Failed {
                    message: e.to_string(),
                }
            }
        };
        level.ids.extend(record.subrefs.clone().unwrap_or_default());
        self.records.push((h.id.clone(), record));
        self.out.ran.push((h.id.clone(), result));
    }

    /// A handler returned: its own patch joins the plan; its result is delivered once its
    /// sub-handlers (if it registered any) have all finished.
    async fn returned(
        &mut self,
        h: &HandlerSpec,
        value: Option<Value>,
        outcome: CallOutcome,
        hbase: &Base,
        record: &mut ProgressRecord,
        level: &mut Level,
    ) -> HandlerOutcome {
        let CallOutcome {
            patch, subhandlers, ..
        } = outcome;
        self.out.plan.merge(&patch);
        if let Some(status) = patch.get("status").filter(|s| s.is_object()) {
            self.out
                .delivered
                .push((h.id.clone(), json!({"status": status})));
        }
        let waiting = if subhandlers.is_empty() {
            None
        } else {
            self.run_children(h, subhandlers, hbase, record).await
        };
        if let Some(d) = waiting {
            // Like Kopf's HandlerChildrenRetry: called again when the sub-handlers may
            // run; its result is delivered only then.
            *record = retrying(record.clone(), crate::clock::now(), d, None);
            level.wait(d);
            return HandlerOutcome::Waiting;
        }
        if let Some(v) = value {
            self.out
                .delivered
                .push((h.id.clone(), json!({"status": {&h.id: &v}})));
            self.out.plan.status_result(&h.id, v);
        }
        level.succeeded += 1;
        HandlerOutcome::Succeeded
    }

    /// Runs a parent's sub-handlers; records their ids in the parent's `subrefs`. Returns
    /// the delay until the parent must be called again, or None when all have finished.
    async fn run_children(
        &mut self,
        parent: &HandlerSpec,
        subs: Vec<HandlerSpec>,
        base: &Base,
        record: &mut ProgressRecord,
    ) -> Option<Duration> {
        let children: Vec<HandlerSpec> = subs
            .into_iter()
            .map(|mut s| {
                s.id = format!("{}/{}", parent.id, s.id);
                s
            })
            .collect();
        let children = select(children, self.body, base, |_| true);
        let level = self.run_level(children, base).await;
        let mut refs = record.subrefs.take().unwrap_or_default();
        refs.extend(level.ids.iter().cloned());
        refs.sort();
        refs.dedup();
        record.subrefs = (!refs.is_empty()).then_some(refs);
        if level.done {
            if self.inner.stack.posts_success_events() {
                self.out.events.push(EventSpec::success(&parent.id));
            }
            None
        } else {
            Some(level.delay())
        }
    }
}
