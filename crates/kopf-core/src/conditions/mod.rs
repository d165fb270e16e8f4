//! `status.conditions`, as the Kubernetes API conventions and `metav1.Condition` have them.
//!
//! Handlers record intents per condition type through the [`Conditions`] extractor (one
//! [`ConditionsHandle`] per cycle, shared by its handlers); the operator declares defaults
//! and auto conditions with a [`ConditionsSpec`]. After the cycle, the intents join its
//! [`PatchPlan`](crate::plan::PatchPlan), which applies them to the list with
//! [`apply_intents`] (`meta.SetStatusCondition`'s rules) and writes the cycle's status as one
//! JSON patch guarded by a `test` of the list it read, so other controllers' types are
//! never clobbered. No change, no write.
//!
//! * `model`: [`Condition`], [`ConditionStatus`], [`ConditionError`], [`Intent`],
//!   [`apply_intents`] (pure);
//! * `handle`: [`ConditionsHandle`], [`ConditionsSync`];
//! * `declare`: [`ConditionsSpec`], [`AutoConditions`];
//! * `auto`: [`auto_intents`], the conditions of handlers' outcomes;
//! * `extractor`: the [`Conditions`] handler argument;
//! * `schema`: `JsonSchema` of [`Condition`] and [`ConditionStatus`] (a typed status can hold
//!   them), [`list_schema`].

mod auto;
mod declare;
mod extractor;
mod handle;
mod model;
mod schema;

pub use auto::{auto_intents, handler_condition_type};
pub use declare::{AutoConditions, ConditionsSpec, warn_conditions_fields};
pub use extractor::Conditions;
pub use handle::{ConditionsHandle, ConditionsSync, SyncError, SyncFuture};
pub use model::{
    Condition, ConditionError, ConditionStatus, Intent, MAX_MESSAGE_LEN, MAX_REASON_LEN,
    MAX_TYPE_LEN, apply_intents, format_transition_time, truncate_message, validate_reason,
    validate_type,
};
pub use schema::list_schema;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::processing::HandlerOutcome;
    use serde_json::{Value, json};

    fn t(s: &str) -> jiff::Timestamp {
        s.parse().expect("a timestamp")
    }

    fn set(type_: &str, status: ConditionStatus, reason: &str, message: &str) -> Intent {
        Intent::set(type_, status, reason, message)
    }

    fn list() -> Value {
        json!([
            {"type": "Other", "status": "True", "reason": "Theirs", "message": "",
             "lastTransitionTime": "2020-01-01T00:00:00Z", "extra": 1},
            {"type": "Ready", "status": "False", "reason": "Pending", "message": "wait",
             "lastTransitionTime": "2021-01-01T00:00:00Z", "observedGeneration": 1},
            {"type": "Last", "status": "Unknown", "reason": "X", "message": "",
             "lastTransitionTime": "2022-01-01T00:00:00Z"},
        ])
    }

    #[test]
    fn transition_time_changes_only_with_the_status() {
        let now = t("2024-01-02T03:04:05.678Z");
        let out = apply_intents(
            Some(&list()),
            &[set(
                "Ready",
                ConditionStatus::False,
                "StillPending",
                "longer",
            )],
            Some(2),
            now,
        )
        .expect("reason, message and generation change");
        assert_eq!(out[1]["lastTransitionTime"], "2021-01-01T00:00:00Z");
        assert_eq!(out[1]["reason"], "StillPending");
        assert_eq!(out[1]["message"], "longer");
        assert_eq!(out[1]["observedGeneration"], 2);
        let out = apply_intents(
            Some(&list()),
            &[set("Ready", ConditionStatus::True, "Done", "")],
            Some(2),
            now,
        )
        .expect("the status flips");
        assert_eq!(out[1]["lastTransitionTime"], "2024-01-02T03:04:05Z");
        assert_eq!(out[1]["status"], "True");
        // Others verbatim and in order.
        assert_eq!(out[0], list()[0]);
        assert_eq!(out[2], list()[2]);
    }

    #[test]
    fn removal_appending_ensure_and_no_op() {
        let now = t("2024-01-02T03:04:05Z");
        let out = apply_intents(Some(&list()), &[Intent::Remove("Ready".into())], None, now)
            .expect("removed");
        assert_eq!(out, vec![list()[0].clone(), list()[2].clone()]);
        assert_eq!(
            apply_intents(Some(&list()), &[Intent::Remove("Absent".into())], None, now),
            None
        );
        // Ensure does not touch an existing type; appends a missing one.
        let ensure = |ty: &str| Intent::Ensure {
            type_: ty.into(),
            status: ConditionStatus::Unknown,
            reason: "Pending".into(),
            message: String::new(),
            observed_generation: None,
        };
        assert_eq!(
            apply_intents(Some(&list()), &[ensure("Ready")], Some(1), now),
            None
        );
        let out = apply_intents(None, &[ensure("New")], Some(4), now).expect("added");
        assert_eq!(
            out,
            vec![
                json!({"type": "New", "status": "Unknown", "reason": "Pending", "message": "",
                "lastTransitionTime": "2024-01-02T03:04:05Z", "observedGeneration": 4})
            ]
        );
        // The same values again: nothing changes (no hot loop); later intents win.
        let same = set("Ready", ConditionStatus::False, "Pending", "wait");
        assert_eq!(apply_intents(Some(&list()), &[same], Some(1), now), None);
        let out = apply_intents(
            Some(&list()),
            &[
                set("Ready", ConditionStatus::True, "A", ""),
                set("Ready", ConditionStatus::False, "Pending", "wait"),
            ],
            Some(1),
            now,
        );
        assert_eq!(out, None, "the later intent wins, and it is what is there");
        // No generation at all: the field is left out (never null).
        let out = apply_intents(None, &[set("A", ConditionStatus::True, "R", "")], None, now)
            .expect("added");
        assert!(out[0].get("observedGeneration").is_none());
    }

    #[test]
    fn invalid_types_and_reasons_are_rejected() {
        for good in ["Ready", "example.com/Synced", "a", "A-b_c.d9", "x.y-z/Q"] {
            assert!(validate_type(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "-Ready",
            "Ready-",
            "Has space",
            "Up/x/y",
            "UP.com/Ready",
            "/Ready",
        ] {
            let e = validate_type(bad).expect_err(bad);
            assert!(e.to_string().contains("invalid condition type"), "{e}");
        }
        assert!(validate_type(&"a".repeat(317)).is_err());
        for good in ["Succeeded", "A", "a_b,c:d", "Z9"] {
            assert!(validate_reason(good).is_ok(), "{good}");
        }
        for bad in ["", "9Lives", "Ends:", "Ends,", "has space", "dash-ed"] {
            let e = validate_reason(bad).expect_err(bad);
            assert!(e.to_string().contains(&format!("{bad:?}")), "{e}");
        }
        assert!(validate_reason(&"a".repeat(1025)).is_err());
        let handle = ConditionsHandle::new(&json!({}));
        assert!(
            handle
                .set("bad type", ConditionStatus::True, "R", "")
                .is_err()
        );
        assert!(handle.set("Ok", ConditionStatus::True, "", "").is_err());
        assert!(handle.intents().is_empty(), "nothing recorded");
    }

    #[test]
    fn messages_are_truncated_on_a_char_boundary() {
        let long = "é".repeat(MAX_MESSAGE_LEN); // 2 bytes each
        let cut = truncate_message(&long);
        assert!(cut.len() <= MAX_MESSAGE_LEN && cut.len() >= MAX_MESSAGE_LEN - 1);
        let out = apply_intents(
            None,
            &[set("A", ConditionStatus::True, "R", &long)],
            None,
            t("2024-01-01T00:00:00Z"),
        )
        .expect("added");
        assert_eq!(out[0]["message"].as_str().map(str::len), Some(cut.len()));
    }

    #[test]
    fn the_handle_sees_its_intents_and_reports_changes() {
        let body = json!({"metadata": {"generation": 7}, "status": {"conditions": list()}});
        let handle = ConditionsHandle::new(&body);
        assert!(handle.is_true("Other"));
        assert_eq!(
            handle.get("Ready").map(|c| c.status),
            Some(ConditionStatus::False)
        );
        assert_eq!(
            handle.set("Ready", ConditionStatus::True, "Done", ""),
            Ok(true)
        );
        assert!(handle.is_true("Ready"));
        assert_eq!(
            handle.get("Ready").and_then(|c| c.observed_generation),
            Some(7)
        );
        assert_eq!(
            handle.set("Ready", ConditionStatus::True, "Done", ""),
            Ok(false)
        );
        assert!(handle.remove("Last"));
        assert!(!handle.remove("Last"));
        assert_eq!(handle.intents().len(), 4);
        assert_eq!(handle.take_intents().len(), 4);
        assert!(handle.intents().is_empty());
    }

    #[test]
    fn handlers_about_status_conditions_are_reported() {
        let noop = |_c: crate::handler::Cause| async { Ok(None) };
        let about = crate::handler::HandlerSpec::field_handler(
            "watch",
            "status.conditions",
            std::sync::Arc::new(noop),
        );
        let other = crate::handler::HandlerSpec::field_handler(
            "watch",
            "spec.conditions",
            std::sync::Arc::new(noop),
        );
        assert_eq!(
            warn_conditions_fields(&[about, other]),
            vec!["watch/status.conditions".to_string()]
        );
    }

    #[tokio::test]
    async fn sync_needs_a_writer() {
        let handle = ConditionsHandle::new(&json!({}));
        handle
            .set("A", ConditionStatus::True, "R", "")
            .expect("valid");
        assert_eq!(handle.sync().await, Err(SyncError::NoWriter));
        assert_eq!(handle.intents().len(), 1, "kept for the cycle's write");
    }

    #[test]
    fn auto_conditions_follow_the_outcomes() {
        let auto = AutoConditions {
            per_handler: true,
            summary: Some("Ready".into()),
            kstatus: true,
        };
        let status_of = |intents: &[Intent], ty: &str| {
            intents.iter().find_map(|i| match i {
                Intent::Set {
                    type_,
                    status,
                    reason,
                    ..
                } if type_ == ty => Some((*status, reason.clone())),
                _ => None,
            })
        };
        let ok = auto_intents(
            &auto,
            &[("create_fn".into(), HandlerOutcome::Succeeded)],
            true,
        );
        assert_eq!(
            status_of(&ok, "CreateFnSucceeded"),
            Some((ConditionStatus::True, "Succeeded".into()))
        );
        assert_eq!(
            status_of(&ok, "Ready").map(|s| s.0),
            Some(ConditionStatus::True)
        );
        assert_eq!(
            status_of(&ok, "Stalled").map(|s| s.0),
            Some(ConditionStatus::False)
        );
        assert_eq!(
            status_of(&ok, "Reconciling").map(|s| s.0),
            Some(ConditionStatus::False)
        );
        let retry = [(
            "create_fn".into(),
            HandlerOutcome::Retrying {
                message: "boom".into(),
            },
        )];
        let r = auto_intents(&auto, &retry, false);
        assert_eq!(
            status_of(&r, "CreateFnSucceeded"),
            Some((ConditionStatus::Unknown, "Retrying".into()))
        );
        assert_eq!(
            status_of(&r, "Ready").map(|s| s.0),
            Some(ConditionStatus::Unknown)
        );
        assert_eq!(
            status_of(&r, "Reconciling").map(|s| s.0),
            Some(ConditionStatus::True)
        );
        let failed = [(
            "create_fn".into(),
            HandlerOutcome::Failed {
                message: "no".into(),
            },
        )];
        let f = auto_intents(&auto, &failed, true);
        assert_eq!(
            status_of(&f, "CreateFnSucceeded"),
            Some((ConditionStatus::False, "Failed".into()))
        );
        assert_eq!(
            status_of(&f, "Ready").map(|s| s.0),
            Some(ConditionStatus::False)
        );
        assert_eq!(
            status_of(&f, "Stalled").map(|s| s.0),
            Some(ConditionStatus::True)
        );
        assert!(auto_intents(&AutoConditions::default(), &failed, true).is_empty());
        // An earlier failure of the cause (empty id): the summary stays False.
        let earlier = [
            ("update_fn".into(), HandlerOutcome::Succeeded),
            (
                String::new(),
                HandlerOutcome::Failed {
                    message: "earlier".into(),
                },
            ),
        ];
        let e = auto_intents(&auto, &earlier, true);
        assert_eq!(
            status_of(&e, "Ready").map(|s| s.0),
            Some(ConditionStatus::False)
        );
        assert_eq!(
            status_of(&e, "Stalled").map(|s| s.0),
            Some(ConditionStatus::True)
        );
        assert_eq!(
            status_of(&e, "UpdateFnSucceeded").map(|s| s.0),
            Some(ConditionStatus::True)
        );
        assert_eq!(
            e.iter()
                .filter(|i| i.type_().ends_with("Succeeded"))
                .count(),
            1
        );
        assert_eq!(
            handler_condition_type("update/spec.field"),
            "UpdateSpecFieldSucceeded"
        );
        assert!(validate_type(&handler_condition_type("__")).is_ok());
    }
}
