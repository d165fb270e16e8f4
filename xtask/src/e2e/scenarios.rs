//! The scenario of each example operator: what it is run with, and what must be seen after
//! each step (the table [`SCENARIOS`]), and the timings of the steps.

use std::time::Duration;

/// How long one step may take to show its outcome.
pub(crate) const STEP_TIMEOUT: Duration = Duration::from_secs(20);
/// How long an operator may take to exit after SIGTERM.
pub(crate) const STOP_TIMEOUT: Duration = Duration::from_secs(20);
/// How often the object is read while waiting.
pub(crate) const POLL: Duration = Duration::from_millis(200);
pub(crate) const NAMESPACE: &str = "default";
pub(crate) const FINALIZER: &str = "kopf.zalando.org/KopfFinalizerMarker";
pub(crate) const DIFFBASE: &str = "kopf.zalando.org/last-handled-configuration";
/// The objects, in their stored version: with a second version served (the admission
/// example), the preferred one is v2, which needs the conversion webhook, and there is none
/// while the operator is stopped.
pub(crate) const RESOURCE: &str = "kopfexamples.v1.kopf.dev";

/// What to wait for on the object, in the logs, or around it.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Check {
    /// The JSON at this pointer into the object equals this JSON text.
    Eq(&'static str, &'static str),
    /// The number at this pointer is at least this.
    AtLeast(&'static str, u64),
    /// The value at this pointer is set and differs from what it was when the step began.
    Changes(&'static str),
    /// The object carries Kopf's finalizer (true) or not (false).
    Finalizer(bool),
    /// The last-handled-configuration annotation holds the object's current spec.
    Handled,
    /// The current operator process logged a line containing this (`{name}`: the object).
    Log(&'static str),
    /// An Event with this reason was posted about the object.
    Event(&'static str),
    /// The ConfigMap named at this pointer exists and is owned by the object.
    OwnedConfigMap(&'static str),
    /// The ConfigMap found by `OwnedConfigMap` is gone (garbage-collected with its owner).
    ChildGone,
    /// `status.conditions` has this type with this status.
    Condition(&'static str, &'static str),
    /// `kubectl wait --for=condition=<type>` (started when first checked, before the
    /// condition is True) has returned successfully, within 1 s of the condition being
    /// seen True by polling.
    KubectlWait(&'static str),
    /// The ConfigMap found by `OwnedConfigMap` holds the object's `spec.field` as `field`.
    ChildMatchesSpec,
    /// The ConfigMap found by `OwnedConfigMap` is deleted by hand (when first checked),
    /// then comes back (a new uid) holding the object's `spec.field`: a reconcile's work.
    ChildDeletedComesBack,
    /// The ConfigMap found by `OwnedConfigMap` is edited by hand (when first checked), then
    /// holds the object's `spec.field` again: a reconcile's work.
    ChildEditedComesBack,
    /// The object is gone.
    Gone,
    /// This merge patch, sent as a server-side dry run, is refused with a message containing
    /// this text (an admission webhook's denial).
    Denied(&'static str, &'static str),
    /// This merge patch, sent as a server-side dry run, is admitted and kubectl prints a
    /// warning containing this text.
    Warned(&'static str, &'static str),
    /// Read in this API version (`kopfexamples.<version>.kopf.dev`), the JSON at this
    /// pointer equals this JSON text (a conversion webhook's work).
    Served(&'static str, &'static str, &'static str),
}

use Check::*;

/// What an example needs around it, beyond `examples/crd.yaml` and the operator alone.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Setup {
    /// A CRD file applied before the scenario (instead of `examples/crd.yaml`, which is
    /// restored afterwards).
    pub(crate) crd: Option<&'static str>,
    /// The operator serves admission webhooks and manages the webhook configurations of
    /// this name: it gets a free port and a host the API server can reach, the
    /// configurations are deleted afterwards.
    pub(crate) webhooks: Option<&'static str>,
    /// A log line each operator process shows once it is ready (before the object is
    /// created, and before the restarted process is checked).
    pub(crate) ready: Option<&'static str>,
    /// The example's own resource, instead of a KopfExample.
    pub(crate) object: Option<Object>,
}

/// Nothing special: `examples/crd.yaml` and the operator.
pub(crate) const PLAIN: Setup = Setup {
    crd: None,
    webhooks: None,
    ready: None,
    object: None,
};

/// A resource of an example's own: its CRD (applied before the scenario, and left in place)
/// and an object of it, which the steps create, patch and delete.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Object {
    /// The CRD's file, and its name (waited for until Established).
    pub(crate) crd: (&'static str, &'static str),
    /// The resource for kubectl, in its stored version.
    pub(crate) resource: &'static str,
    /// The object's file, and the name in it (replaced by `e2e-<example>`).
    pub(crate) file: (&'static str, &'static str),
}

/// The TrainingJob of the pod-log example.
pub(crate) const TRAINING_JOB: Object = Object {
    crd: ("examples/trainingjob-crd.yaml", "trainingjobs.kopf.dev"),
    resource: "trainingjobs.v1.kopf.dev",
    file: ("examples/trainingjob.yaml", "training-1"),
};

/// One example's scenario: what each step must lead to.
pub(crate) struct Scenario {
    pub(crate) example: &'static str,
    pub(crate) setup: Setup,
    /// Text replacements in `examples/obj.yaml` (each must match once) for this example.
    pub(crate) edits: &'static [(&'static str, &'static str)],
    /// After the creation (first operator process; it is stopped right after, so these
    /// pick the moment of the restart).
    pub(crate) created: &'static [Check],
    /// Right after the first process exited on SIGTERM (its logs, the object).
    pub(crate) stopped: &'static [Check],
    /// After the restart (the second process).
    pub(crate) resumed: &'static [Check],
    /// The merge patch of the update step.
    pub(crate) update: &'static str,
    /// After the update.
    pub(crate) updated: &'static [Check],
    /// After the deletion (the object is gone too).
    pub(crate) deleted: &'static [Check],
    /// Lines the first process logged and the second must not (e.g. the creation handled
    /// twice); `{name}`: the object's name.
    pub(crate) never_after_restart: &'static [&'static str],
}

pub(crate) const FIELD_CHANGED: &str = r#"{"spec":{"field":"changed"}}"#;

/// The expectations, from each example's code and its in-process test
/// (crates/kopf/tests/examples.rs, crates/kopf/tests/spawning.rs).
pub(crate) const SCENARIOS: &[Scenario] = &[
    Scenario {
        example: "minimal",
        setup: PLAIN,
        edits: &[],
        created: &[
            Eq("/status/create_fn", r#"{"message":"hello world"}"#),
            Log("Handler 'create_fn' succeeded"),
            Finalizer(false),
            Handled,
        ],
        stopped: &[],
        resumed: &[],
        update: FIELD_CHANGED,
        updated: &[
            Handled,
            Eq("/status/update_fn", r#"{"field":"changed"}"#),
            Log("Handler 'update_fn' succeeded"),
        ],
        deleted: &[],
        never_after_restart: &["Handler 'create_fn'", "And here we are!"],
    },
    Scenario {
        example: "handlers",
        setup: PLAIN,
        edits: &[],
        created: &[
            Eq("/status/create_fn", r#"{"message":"created"}"#),
            Log("creating {name} with spec"),
            Finalizer(true),
            Handled,
        ],
        stopped: &[Finalizer(true)],
        resumed: &[Log("Handler 'resume_fn' succeeded")],
        update: FIELD_CHANGED,
        updated: &[
            Eq("/status/update_fn", r#"{"message":"updated"}"#),
            Log("Handler 'update_fn' succeeded"),
            Eq(
                "/status/field_fn~1spec.field",
                r#"{"old":"value","new":"changed"}"#,
            ),
            Handled,
        ],
        deleted: &[Log("deleting {name}"), Log("Handler 'delete_fn' succeeded")],
        never_after_restart: &["Handler 'create_fn'"],
    },
    Scenario {
        example: "errors",
        setup: PLAIN,
        edits: &[],
        // Stopped while `eventually_fn` waits for its second attempt: the next process
        // goes on from the recorded retry count.
        created: &[Log("not yet (attempt 0)")],
        stopped: &[],
        resumed: &[
            Eq("/status/eventually_fn", r#""done after 2 retries""#),
            Log("Handler 'eventually_fn' succeeded"),
            Handled,
        ],
        update: FIELD_CHANGED,
        updated: &[Handled],
        deleted: &[],
        never_after_restart: &["not yet (attempt 0)"],
    },
    Scenario {
        example: "filters",
        setup: PLAIN,
        edits: &[],
        created: &[
            Eq("/status/label_value_fn", r#""matched""#),
            Eq("/status/label_predicate_fn", r#""matched""#),
            Eq("/status/annotation_present_fn", r#""matched""#),
            Eq("/status/annotation_absent_fn", r#""matched""#),
            Eq("/status/when_fn", r#""matched""#),
            Eq("/status/field_value_fn~1spec.field", r#""matched""#),
            Eq("/status/never_fn", "null"),
            Handled,
        ],
        stopped: &[],
        resumed: &[],
        update: FIELD_CHANGED,
        updated: &[
            Eq(
                "/status/field_changed_fn~1spec.field",
                r#"{"from":"value","to":"changed"}"#,
            ),
            Handled,
        ],
        deleted: &[],
        never_after_restart: &["Handler 'label_value_fn'", "{name} matched"],
    },
    Scenario {
        example: "events",
        setup: PLAIN,
        edits: &[],
        created: &[Event("Greeting"), Handled],
        stopped: &[],
        resumed: &[],
        update: r#"{"spec":{"duration":"soon"}}"#,
        updated: &[Event("ParseIntError"), Handled],
        deleted: &[],
        never_after_restart: &["Handler 'create_fn'"],
    },
    Scenario {
        example: "subhandlers",
        setup: PLAIN,
        edits: &[],
        created: &[Eq("/status/create_fn~1item1", r#"{"created":"item1"}"#)],
        stopped: &[],
        resumed: &[
            Eq("/status/create_fn", r#"{"items":2}"#),
            Eq("/status/create_fn~1item2", r#"{"created":"item2"}"#),
            Handled,
        ],
        update: r#"{"spec":{"items":["item1","item2","item3"]}}"#,
        updated: &[
            Eq(
                "/status/items_fn~1spec.items~1item3",
                r#"{"added":"item3"}"#,
            ),
            Handled,
        ],
        deleted: &[
            Log("=== Cleaning up item1 of {name}. ==="),
            Log("=== Cleaning up item3 of {name}. ==="),
        ],
        never_after_restart: &["Handling creation for item1"],
    },
    Scenario {
        example: "decorated",
        setup: PLAIN,
        edits: &[],
        created: &[
            Eq("/status/create_fn", r#"{"message":"hello world"}"#),
            Log("created {name} with field"),
            Handled,
        ],
        stopped: &[],
        resumed: &[],
        update: FIELD_CHANGED,
        updated: &[Log("spec.field changed"), Handled],
        deleted: &[],
        never_after_restart: &["Handler 'create_fn'"],
    },
    Scenario {
        example: "timers",
        setup: PLAIN,
        edits: &[],
        created: &[AtLeast("/status/tick/count", 2), Finalizer(true)],
        stopped: &[Finalizer(true)],
        resumed: &[Changes("/status/tick/count")],
        update: FIELD_CHANGED,
        updated: &[Changes("/status/tick/count")],
        deleted: &[],
        never_after_restart: &[],
    },
    Scenario {
        example: "daemons",
        setup: PLAIN,
        edits: &[],
        created: &[AtLeast("/status/monitor/beats", 2), Finalizer(true)],
        stopped: &[
            Log("monitor stops"),
            Log("sync_monitor stops"),
            Finalizer(true),
        ],
        resumed: &[Changes("/status/monitor/beats")],
        update: FIELD_CHANGED,
        updated: &[Changes("/status/monitor/beats")],
        deleted: &[Log("monitor stops"), Log("sync_monitor stops")],
        never_after_restart: &[],
    },
    Scenario {
        example: "indexes",
        setup: PLAIN,
        edits: &[],
        created: &[Eq("/status/create_fn/peers", "[]"), Handled],
        stopped: &[],
        resumed: &[],
        update: FIELD_CHANGED,
        updated: &[Handled],
        deleted: &[],
        never_after_restart: &["Handler 'create_fn'"],
    },
    Scenario {
        example: "graceful",
        setup: PLAIN,
        // Stopped while the handler works: it finishes within the grace period, and the
        // next process does not run it again.
        edits: &[("duration: 1m", "duration: 3s")],
        created: &[Log("Working for 3s")],
        stopped: &[
            Log("Handler 'work_fn' succeeded"),
            Eq("/status/work_fn", r#"{"worked":"3s"}"#),
        ],
        resumed: &[],
        update: FIELD_CHANGED,
        updated: &[Handled],
        deleted: &[],
        never_after_restart: &["Working for"],
    },
    Scenario {
        example: "children",
        setup: PLAIN,
        edits: &[],
        created: &[OwnedConfigMap("/status/create_fn/child"), Handled],
        stopped: &[],
        resumed: &[],
        update: FIELD_CHANGED,
        updated: &[Handled],
        deleted: &[ChildGone],
        never_after_restart: &["Handler 'create_fn'"],
    },
    Scenario {
        example: "conditions",
        setup: PLAIN,
        edits: &[],
        created: &[
            KubectlWait("Ready"),
            Condition("Ready", "True"),
            Condition("Progressing", "False"),
            Condition("CreateFnSucceeded", "True"),
            Handled,
        ],
        stopped: &[],
        resumed: &[Condition("Ready", "True")],
        update: FIELD_CHANGED,
        updated: &[Handled, Condition("Ready", "True")],
        deleted: &[],
        never_after_restart: &["{name} is provisioned."],
    },
    Scenario {
        example: "reconcile",
        setup: PLAIN,
        edits: &[],
        created: &[
            OwnedConfigMap("/status/child"),
            ChildMatchesSpec,
            Eq("/status/field", r#""value""#),
            Finalizer(true),
            Log("Reconciled (listed)"),
        ],
        stopped: &[Finalizer(true)],
        // The restarted operator reconciles once at start, and again when the owned
        // ConfigMap is deleted by hand.
        resumed: &[
            Log("Reconciled (listed)"),
            ChildDeletedComesBack,
            Log("Reconciled (owned ConfigMap/"),
        ],
        update: FIELD_CHANGED,
        updated: &[
            Eq("/status/field", r#""changed""#),
            ChildMatchesSpec,
            ChildEditedComesBack,
        ],
        deleted: &[ChildGone, Log("Cleaning up after {name}.")],
        never_after_restart: &[],
    },
    Scenario {
        example: "admission",
        // The CRD with v1 and v2; the operator points its conversion at itself.
        setup: Setup {
            crd: Some("examples/admission-crd.yaml"),
            webhooks: Some("kopf.dev"),
            ready: Some("converts through this operator"),
            object: None,
        },
        // Without a duration: the mutating webhook sets the default.
        edits: &[("duration: 1m", "")],
        created: &[
            Eq("/metadata/labels/kopf.dev~1checked", r#""yes""#),
            Eq("/spec/duration", r#""1m""#),
            Served(
                "v2",
                "/spec/items",
                r#"[{"name":"item1"},{"name":"item2"}]"#,
            ),
            Denied(r#"{"spec":{"field":null}}"#, "spec.field is required"),
        ],
        // The transient webhooks are unregistered on exit (the API server would otherwise
        // refuse every write while no operator runs).
        stopped: &[Log("Removed the non-persistent webhooks")],
        resumed: &[Denied(r#"{"spec":{"field":""}}"#, "spec.field is required")],
        update: FIELD_CHANGED,
        updated: &[
            Eq("/spec/field", r#""changed""#),
            Log("Mutating on UPDATE (dry run: false)"),
            Warned(r#"{"spec":{"items":[]}}"#, "spec.items is empty"),
        ],
        deleted: &[],
        never_after_restart: &[],
    },
    Scenario {
        example: "training",
        // The trainer Pod prints its lines (the fake's pod simulator runs its `echo` script).
        setup: Setup {
            object: Some(TRAINING_JOB),
            ..PLAIN
        },
        // Six steps, a second each: time for a restart while it trains.
        edits: &[("steps: 3", "steps: 6")],
        // Stopped once the first lines are handled.
        created: &[AtLeast("/status/step", 1), Log("{name} (Pod ")],
        stopped: &[],
        // The next process follows the (older) Pod from its own start, to the end.
        resumed: &[
            Eq("/status/phase", r#""Done""#),
            Eq("/status/step", "6"),
            Eq("/status/loss", "0.143"),
            Log("{name} (Pod "),
        ],
        update: r#"{"spec":{"image":"busybox:stable"}}"#,
        updated: &[Handled],
        deleted: &[],
        // The lines the first process handled are not handled again.
        never_after_restart: &["Handler 'create_fn'", "step=1 loss=0.500"],
    },
];
