//! `cargo xtask e2e [--cluster kind|fake|current] [--example NAME]... [--keep-going]`
//!
//! Builds the workspace (`cargo test --workspace --no-run --locked`, the build CI already
//! did), starts a cluster (a new kind cluster, `kopf fake-apiserver`, or the current
//! kubeconfig context), applies `examples/crd.yaml`, then runs each example operator of
//! `crates/kopf/examples` as its own process (`run -A --standalone`) through one scenario:
//!
//! 1. create: a copy of `examples/obj.yaml` named `e2e-<example>` in `default`; wait for the
//!    outcome on the object and in the logs;
//! 2. restart: SIGTERM while the operator works (it must exit with status 0), start it
//!    again and check that it resumes without handling the creation a second time;
//! 3. update: a merge patch of the spec, and its outcome;
//! 4. delete: `kubectl delete --wait=false`; the object must go (the finalizer released);
//! 5. stop: SIGTERM again, exit status 0.
//!
//! The expectations per example are the table `SCENARIOS`. `KOPF_E2E_ECHO=1` echoes the
//! operators' output.
//!
//! Some examples need more around them (`Setup`): the admission example gets its two-version
//! CRD (restored to `examples/crd.yaml` afterwards), a free port for its webhook server, and
//! a host the API server reaches: `localhost` for the fake API server, the gateway of kind's
//! container network for kind, `KOPF_E2E_WEBHOOK_HOST` for the current context (or to
//! override the others). Its checks send server-side dry runs, which admission webhooks see
//! but nothing stores.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command as StdCommand;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use kopf_testing::{Cluster, ClusterKind, OperatorRunner};
use serde_json::Value;

/// How long one step may take to show its outcome.
const STEP_TIMEOUT: Duration = Duration::from_secs(20);
/// How long an operator may take to exit after SIGTERM.
const STOP_TIMEOUT: Duration = Duration::from_secs(20);
/// How often the object is read while waiting.
const POLL: Duration = Duration::from_millis(200);
const NAMESPACE: &str = "default";
const FINALIZER: &str = "kopf.zalando.org/KopfFinalizerMarker";
const DIFFBASE: &str = "kopf.zalando.org/last-handled-configuration";
/// The objects, in their stored version: with a second version served (the admission
/// example), the preferred one is v2, which needs the conversion webhook, and there is none
/// while the operator is stopped.
const RESOURCE: &str = "kopfexamples.v1.kopf.dev";

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ClusterArg {
    /// A new kind cluster (needs kind and Docker or Podman), deleted afterwards.
    Kind,
    /// `kopf fake-apiserver` as a separate process.
    Fake,
    /// The cluster of the current kubeconfig context.
    Current,
}

impl From<ClusterArg> for ClusterKind {
    fn from(c: ClusterArg) -> Self {
        match c {
            ClusterArg::Kind => ClusterKind::Kind,
            ClusterArg::Fake => ClusterKind::Fake,
            ClusterArg::Current => ClusterKind::Current,
        }
    }
}

#[derive(Debug, clap::Args)]
pub struct E2eArgs {
    /// The cluster to run against.
    #[arg(long, value_enum, default_value_t = ClusterArg::Fake)]
    cluster: ClusterArg,
    /// Run only this example (repeatable). Default: all of crates/kopf/examples.
    #[arg(long = "example", value_name = "NAME")]
    examples: Vec<String>,
    /// Go on with the next example after a failure (default: stop at the first).
    #[arg(long)]
    keep_going: bool,
    /// Do not build; use the binaries in the target directory as they are.
    #[arg(long)]
    no_build: bool,
}

/// What to wait for on the object, in the logs, or around it.
#[derive(Debug, Clone, Copy)]
enum Check {
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
struct Setup {
    /// A CRD file applied before the scenario (instead of `examples/crd.yaml`, which is
    /// restored afterwards).
    crd: Option<&'static str>,
    /// The operator serves admission webhooks and manages the webhook configurations of
    /// this name: it gets a free port and a host the API server can reach, the
    /// configurations are deleted afterwards.
    webhooks: Option<&'static str>,
    /// A log line each operator process shows once it is ready (before the object is
    /// created, and before the restarted process is checked).
    ready: Option<&'static str>,
}

/// Nothing special: `examples/crd.yaml` and the operator.
const PLAIN: Setup = Setup {
    crd: None,
    webhooks: None,
    ready: None,
};

/// One example's scenario: what each step must lead to.
struct Scenario {
    example: &'static str,
    setup: Setup,
    /// Text replacements in `examples/obj.yaml` (each must match once) for this example.
    edits: &'static [(&'static str, &'static str)],
    /// After the creation (first operator process; it is stopped right after, so these
    /// pick the moment of the restart).
    created: &'static [Check],
    /// Right after the first process exited on SIGTERM (its logs, the object).
    stopped: &'static [Check],
    /// After the restart (the second process).
    resumed: &'static [Check],
    /// The merge patch of the update step.
    update: &'static str,
    /// After the update.
    updated: &'static [Check],
    /// After the deletion (the object is gone too).
    deleted: &'static [Check],
    /// Lines the first process logged and the second must not (e.g. the creation handled
    /// twice); `{name}`: the object's name.
    never_after_restart: &'static [&'static str],
}

const FIELD_CHANGED: &str = r#"{"spec":{"field":"changed"}}"#;

/// The expectations, from each example's code and its in-process test
/// (crates/kopf/tests/examples.rs, crates/kopf/tests/spawning.rs).
const SCENARIOS: &[Scenario] = &[
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
        example: "admission",
        // The CRD with v1 and v2; the operator points its conversion at itself.
        setup: Setup {
            crd: Some("examples/admission-crd.yaml"),
            webhooks: Some("kopf.dev"),
            ready: Some("converts through this operator"),
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
];

struct Paths {
    root: PathBuf,
    kopf: PathBuf,
    examples: PathBuf,
}

pub async fn run(args: E2eArgs) -> Result<()> {
    let kind = ClusterKind::from(args.cluster);
    // Missing tools, or an unreachable current context, fail now, not after a long build.
    Cluster::builder(kind).check_tools().await?;
    let mut current = None;
    if kind == ClusterKind::Current {
        current = Some(Cluster::start(kind).await?);
    }
    let paths = locate()?;
    let available = example_names(&paths.root)?;
    for name in &args.examples {
        if !available.contains(name) {
            bail!(
                "no example {name:?} in crates/kopf/examples (there are: {})",
                available.join(", ")
            );
        }
    }
    let selected: Vec<String> = if args.examples.is_empty() {
        available
    } else {
        args.examples.clone()
    };
    if !args.no_build {
        build(&paths.root)?;
    }
    for bin in
        std::iter::once(paths.kopf.clone()).chain(selected.iter().map(|e| paths.examples.join(e)))
    {
        if !bin.is_file() {
            bail!(
                "{} is missing: build with `cargo test --workspace --no-run --locked` and `cargo build --locked -p kopf-cli` (or drop --no-build)",
                bin.display()
            );
        }
    }
    let started = Instant::now();
    let cluster = match current {
        Some(cluster) => cluster,
        None => {
            println!("e2e: starting the {kind} cluster");
            Cluster::builder(kind)
                .kopf_binary(&paths.kopf)
                .start()
                .await?
        }
    };
    println!(
        "e2e: {} (kubeconfig {})",
        cluster.description(),
        cluster.kubeconfig().display()
    );
    // On Ctrl-C, the operators are killed and the cluster is still torn down.
    let outcome = tokio::select! {
        outcome = run_all(&cluster, &paths, &selected, args.keep_going) => outcome,
        _ = tokio::signal::ctrl_c() => Err(anyhow!("interrupted")),
    };
    if let Err(e) = cluster.teardown().await {
        println!("e2e: warning: the teardown failed: {e}");
    }
    let (passed, failed, not_run) = outcome?;
    let mut summary = format!("e2e: {passed} passed, {failed} failed");
    if not_run > 0 {
        let _ = write!(summary, ", {not_run} not run");
    }
    println!(
        "{summary} ({:.1} s on the {kind} cluster)",
        started.elapsed().as_secs_f64()
    );
    if failed > 0 {
        bail!("{failed} end-to-end scenario(s) failed");
    }
    Ok(())
}

async fn run_all(
    cluster: &Cluster,
    paths: &Paths,
    selected: &[String],
    keep_going: bool,
) -> Result<(usize, usize, usize)> {
    cluster
        .apply_file(paths.root.join("examples/crd.yaml"))
        .await?;
    cluster
        .kubectl([
            "wait",
            "--for=condition=Established",
            "crd/kopfexamples.kopf.dev",
            "--timeout=60s",
        ])
        .await?;
    let template = std::fs::read_to_string(paths.root.join("examples/obj.yaml"))
        .context("reading examples/obj.yaml")?;
    let (mut passed, mut failed) = (0, 0);
    for (i, example) in selected.iter().enumerate() {
        let t0 = Instant::now();
        println!("== {example}");
        let result = match SCENARIOS.iter().find(|s| s.example == example) {
            Some(scenario) => {
                let name = format!("e2e-{example}");
                let mut e2e = E2e {
                    cluster,
                    scenario,
                    name: name.clone(),
                    binary: paths.examples.join(example),
                    child: None,
                    step: "setup",
                    run_args: Vec::new(),
                };
                // The operators are killed when `run` returns.
                let mut r = match prepare(cluster, paths, &scenario.setup).await {
                    Ok(run_args) => {
                        e2e.run_args = run_args;
                        e2e.run(&template)
                            .await
                            .with_context(|| format!("step {}", e2e.step))
                    }
                    Err(e) => Err(e.context("step setup")),
                };
                // Leave nothing behind for the next example, even after a failure.
                if r.is_err() {
                    force_delete(cluster, &name).await;
                }
                if let Err(e) = restore(cluster, paths, &scenario.setup).await
                    && r.is_ok()
                {
                    r = Err(e.context("restoring the cluster"));
                }
                r
            }
            None => Err(anyhow!(
                "no scenario for the example {example}: add one to SCENARIOS in xtask/src/e2e.rs"
            )),
        };
        let secs = t0.elapsed().as_secs_f64();
        match result {
            Ok(()) => {
                passed += 1;
                println!("   {example}: passed ({secs:.1} s)");
            }
            Err(e) => {
                failed += 1;
                println!("   {example}: FAILED ({secs:.1} s): {e:#}");
                if !keep_going {
                    return Ok((passed, failed, selected.len() - i - 1));
                }
            }
        }
    }
    Ok((passed, failed, 0))
}

/// One example's run.
struct E2e<'a> {
    cluster: &'a Cluster,
    scenario: &'a Scenario,
    name: String,
    binary: PathBuf,
    /// The ConfigMap found by `OwnedConfigMap`.
    child: Option<String>,
    /// The step under way (or the last one).
    step: &'static str,
    /// More arguments for `run` (the webhook server's port and host).
    run_args: Vec<String>,
}

impl E2e<'_> {
    async fn run(&mut self, template: &str) -> Result<()> {
        let sc = self.scenario;
        let object = object_yaml(template, &self.name, sc.edits)?;
        force_delete(self.cluster, &self.name).await;

        let t = self.begin("create");
        let mut first = self.start_operator(1)?;
        self.wait_ready(&mut first).await?;
        self.cluster
            .kubectl_with_input(["apply", "-n", NAMESPACE, "-f", "-"], &object)
            .await?;
        self.wait(&mut first, sc.created, true).await?;
        self.done(t);

        let t = self.begin("restart");
        let status = first.stop(STOP_TIMEOUT).await?;
        if !status.success() {
            bail!(
                "the operator exited with {status} on SIGTERM (expected 0); the last lines:\n{}",
                first.tail(30)
            );
        }
        self.wait(&mut first, sc.stopped, false).await?;
        // A line that the first process never logged proves nothing by its absence later.
        let never: Vec<String> = sc
            .never_after_restart
            .iter()
            .map(|l| l.replace("{name}", &self.name))
            .collect();
        for line in &never {
            if !first.has_logged(line) {
                bail!(
                    "the scenario expects {line:?} in the first process's logs (and not in the second's), but it is not there; the logs:\n{}",
                    first.logs()
                );
            }
        }
        let mut second = self.start_operator(2)?;
        self.wait_ready(&mut second).await?;
        self.wait(&mut second, sc.resumed, true).await?;
        self.done(t);

        let t = self.begin("update");
        self.kubectl_object(&["patch", "--type", "merge", "-p", sc.update])
            .await?;
        self.wait(&mut second, sc.updated, true).await?;
        self.done(t);

        let t = self.begin("delete");
        self.kubectl_object(&["delete", "--wait=false"]).await?;
        let mut checks = vec![Gone];
        checks.extend_from_slice(sc.deleted);
        self.wait(&mut second, &checks, true).await?;
        self.done(t);

        let t = self.begin("stop");
        let status = second.stop(STOP_TIMEOUT).await?;
        if !status.success() {
            bail!(
                "the restarted operator exited with {status} on SIGTERM (expected 0); the last lines:\n{}",
                second.tail(30)
            );
        }
        let logs = second.logs();
        for line in &never {
            if logs.contains(line.as_str()) {
                bail!(
                    "after the restart, the operator logged {line:?} (the creation was handled again); its logs:\n{logs}"
                );
            }
        }
        self.done(t);
        Ok(())
    }

    /// Waits for the scenario's readiness line, if it has one.
    async fn wait_ready(&mut self, op: &mut OperatorRunner) -> Result<()> {
        match self.scenario.setup.ready {
            Some(line) => self.wait(op, &[Log(line)], true).await,
            None => Ok(()),
        }
    }

    fn begin(&mut self, step: &'static str) -> Instant {
        self.step = step;
        Instant::now()
    }

    fn done(&self, started: Instant) {
        println!(
            "   {:<8} ok ({:.1} s)",
            self.step,
            started.elapsed().as_secs_f64()
        );
    }

    fn start_operator(&self, run: u32) -> Result<OperatorRunner> {
        OperatorRunner::command(&self.binary)
            .args(["run", "-A", "--standalone"])
            .args(&self.run_args)
            .env("KUBECONFIG", self.cluster.kubeconfig())
            // Settings from the caller's environment that would change what is checked.
            .env_remove("KOPF_RUN_NAMESPACE")
            .env_remove("KOPF_RUN_LOG_FORMAT")
            .name(format!("{}#{run}", self.scenario.example))
            .start()
            .with_context(|| format!("starting the operator {}", self.binary.display()))
    }

    async fn kubectl_object(&self, args: &[&str]) -> Result<String> {
        let mut all = vec![args[0], RESOURCE, &self.name, "-n", NAMESPACE];
        all.extend_from_slice(&args[1..]);
        Ok(self.cluster.kubectl(all).await?)
    }

    /// `kubectl get configmap NAME -o OUTPUT` in the namespace (empty if it is not there).
    async fn configmap(&self, name: &str, output: &str) -> Result<String, String> {
        self.cluster
            .kubectl([
                "get",
                "configmap",
                name,
                "-n",
                NAMESPACE,
                "--ignore-not-found",
                "-o",
                output,
            ])
            .await
            .map_err(|e| e.to_string())
    }

    async fn get_object(&self) -> Result<Option<Value>> {
        let out = self
            .kubectl_object(&["get", "--ignore-not-found", "-o", "json"])
            .await?;
        if out.trim().is_empty() {
            return Ok(None);
        }
        Ok(Some(
            serde_json::from_str(&out).context("parsing the object")?,
        ))
    }

    /// Polls until every check passes; fails after [`STEP_TIMEOUT`] with what is still
    /// missing, or at once if the operator (expected to run) exits.
    async fn wait(
        &mut self,
        op: &mut OperatorRunner,
        checks: &[Check],
        running: bool,
    ) -> Result<()> {
        let deadline = Instant::now() + STEP_TIMEOUT;
        let baseline = self.get_object().await?;
        loop {
            if running && let Some(status) = op.try_status() {
                bail!(
                    "the operator exited unexpectedly ({status}); the last lines:\n{}",
                    op.tail(30)
                );
            }
            let object = self.get_object().await?;
            let mut missing = Vec::new();
            for check in checks {
                if let Err(why) = self
                    .check(*check, op, object.as_ref(), baseline.as_ref())
                    .await
                {
                    missing.push(why);
                }
            }
            if missing.is_empty() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                bail!(
                    "after {STEP_TIMEOUT:?}:\n  - {}\nthe object: {}\nthe operator's last lines:\n{}",
                    missing.join("\n  - "),
                    object.map_or("(none)".into(), brief),
                    op.tail(30)
                );
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Ok, or what is wrong.
    async fn check(
        &mut self,
        check: Check,
        op: &OperatorRunner,
        object: Option<&Value>,
        baseline: Option<&Value>,
    ) -> Result<(), String> {
        let at = |pointer: &str| object.and_then(|o| o.pointer(pointer)).cloned();
        match check {
            Eq(pointer, json) => {
                let want: Value = serde_json::from_str(json).map_err(|e| e.to_string())?;
                let got = at(pointer).unwrap_or(Value::Null);
                (got == want)
                    .then_some(())
                    .ok_or_else(|| format!("{pointer} is {got}, expected {want}"))
            }
            AtLeast(pointer, n) => {
                let got = at(pointer);
                (got.as_ref().and_then(Value::as_u64) >= Some(n))
                    .then_some(())
                    .ok_or_else(|| format!("{pointer} is {got:?}, expected at least {n}"))
            }
            Changes(pointer) => {
                let before = baseline.and_then(|o| o.pointer(pointer)).cloned();
                let got = at(pointer);
                (got.is_some() && got != before)
                    .then_some(())
                    .ok_or_else(|| format!("{pointer} stays {got:?}"))
            }
            Finalizer(want) => {
                let has = object
                    .and_then(|o| o.pointer("/metadata/finalizers"))
                    .and_then(Value::as_array)
                    .is_some_and(|f| f.iter().any(|f| f == FINALIZER));
                (has == want).then_some(()).ok_or_else(|| {
                    format!("the finalizer is {}", if has { "there" } else { "missing" })
                })
            }
            Handled => {
                let diffbase = object
                    .and_then(|o| o.pointer("/metadata/annotations"))
                    .and_then(|a| a.get(DIFFBASE))
                    .and_then(Value::as_str)
                    .and_then(|t| serde_json::from_str::<Value>(t).ok());
                let spec = at("/spec");
                (diffbase.as_ref().and_then(|d| d.get("spec")) == spec.as_ref())
                    .then_some(())
                    .ok_or_else(|| {
                        format!("the last handled spec is {diffbase:?}, not the current {spec:?}")
                    })
            }
            Log(text) => {
                let text = text.replace("{name}", &self.name);
                op.has_logged(&text)
                    .then_some(())
                    .ok_or_else(|| format!("no log line with {text:?}"))
            }
            Event(reason) => {
                let out = self
                    .cluster
                    .kubectl(["get", "events", "-n", NAMESPACE, "-o", "json"])
                    .await
                    .map_err(|e| e.to_string())?;
                let events: Value = serde_json::from_str(&out).map_err(|e| e.to_string())?;
                let found = events["items"].as_array().is_some_and(|items| {
                    items.iter().any(|e| {
                        e["involvedObject"]["name"] == self.name.as_str() && e["reason"] == reason
                    })
                });
                found
                    .then_some(())
                    .ok_or_else(|| format!("no Event {reason:?} about the object"))
            }
            OwnedConfigMap(pointer) => {
                let child = at(pointer)
                    .and_then(|v| v.as_str().map(str::to_string))
                    .ok_or_else(|| format!("{pointer} has no ConfigMap name"))?;
                let out = self.configmap(&child, "json").await?;
                let cm: Value = serde_json::from_str(&out)
                    .map_err(|_| format!("the ConfigMap {child} does not exist"))?;
                let uid = at("/metadata/uid");
                let owned = cm["metadata"]["ownerReferences"]
                    .as_array()
                    .is_some_and(|refs| refs.iter().any(|r| Some(&r["uid"]) == uid.as_ref()));
                self.child = Some(child.clone());
                owned
                    .then_some(())
                    .ok_or_else(|| format!("the ConfigMap {child} is not owned by the object"))
            }
            ChildGone => {
                let child = self.child.clone().ok_or("no child ConfigMap was seen")?;
                let out = self.configmap(&child, "name").await?;
                out.trim()
                    .is_empty()
                    .then_some(())
                    .ok_or_else(|| format!("the ConfigMap {child} is still there"))
            }
            Gone => object
                .is_none()
                .then_some(())
                .ok_or_else(|| "the object is still there".to_string()),
            Denied(patch, text) => match self.dry_run_patch(patch).await? {
                (false, stderr) if stderr.contains(text) => Ok(()),
                (false, stderr) => Err(format!(
                    "the dry-run patch {patch} was refused, but not with {text:?}: {stderr}"
                )),
                (true, _) => Err(format!(
                    "the dry-run patch {patch} was admitted (expected a denial with {text:?})"
                )),
            },
            Warned(patch, text) => match self.dry_run_patch(patch).await? {
                (true, stderr) if stderr.contains("Warning:") && stderr.contains(text) => Ok(()),
                (true, stderr) => Err(format!(
                    "the dry-run patch {patch} was admitted without a warning with {text:?} (kubectl printed {stderr:?})"
                )),
                (false, stderr) => Err(format!("the dry-run patch {patch} was refused: {stderr}")),
            },
            Served(version, pointer, json) => {
                let want: Value = serde_json::from_str(json).map_err(|e| e.to_string())?;
                let resource = format!("kopfexamples.{version}.kopf.dev");
                let out = self
                    .cluster
                    .kubectl(["get", &resource, &self.name, "-n", NAMESPACE, "-o", "json"])
                    .await
                    .map_err(|e| e.to_string())?;
                let served: Value = serde_json::from_str(&out).map_err(|e| e.to_string())?;
                let got = served.pointer(pointer).cloned().unwrap_or(Value::Null);
                (got == want)
                    .then_some(())
                    .ok_or_else(|| format!("in {version}, {pointer} is {got}, expected {want}"))
            }
        }
    }

    /// `kubectl patch --dry-run=server` of the object with a merge patch: admitted or not,
    /// and what kubectl printed on stderr (denials, warnings).
    async fn dry_run_patch(&self, patch: &str) -> Result<(bool, String), String> {
        let args = [
            "patch",
            RESOURCE,
            &self.name,
            "-n",
            NAMESPACE,
            "--type",
            "merge",
            "--dry-run=server",
            "-p",
            patch,
        ];
        let mut cmd = self.cluster.kubectl_command(args);
        cmd.kill_on_drop(true);
        let out = tokio::time::timeout(STEP_TIMEOUT, cmd.output())
            .await
            .map_err(|_| format!("kubectl patch --dry-run=server took over {STEP_TIMEOUT:?}"))?
            .map_err(|e| format!("running kubectl: {e}"))?;
        Ok((
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).trim().to_string(),
        ))
    }
}

/// Sets up what the scenario needs beyond `examples/crd.yaml`; returns the operator's extra
/// `run` arguments.
async fn prepare(cluster: &Cluster, paths: &Paths, setup: &Setup) -> Result<Vec<String>> {
    let mut args = Vec::new();
    if setup.webhooks.is_some() {
        // A free port (0): two scenarios, or another program, may want 9443.
        args.extend(["--webhook-port".to_string(), "0".to_string()]);
        // Found before anything changes in the cluster: the missing host is the likely error.
        if let Some(host) = webhook_host(cluster).await? {
            args.extend(["--webhook-host".to_string(), host]);
        }
    }
    if let Some(crd) = setup.crd {
        cluster.apply_file(paths.root.join(crd)).await?;
    }
    Ok(args)
}

/// Undoes `prepare`: the plain CRD again (no conversion, v1 only), and no webhook
/// configurations.
async fn restore(cluster: &Cluster, paths: &Paths, setup: &Setup) -> Result<()> {
    if let Some(name) = setup.webhooks {
        for kind in [
            "validatingwebhookconfigurations",
            "mutatingwebhookconfigurations",
        ] {
            cluster
                .kubectl(["delete", kind, name, "--ignore-not-found"])
                .await?;
        }
    }
    if setup.crd.is_some() {
        // `apply` keeps fields it did not set: the operator's conversion stanza goes first.
        cluster
            .kubectl([
                "patch",
                "crd",
                "kopfexamples.kopf.dev",
                "--type",
                "merge",
                "-p",
                r#"{"spec":{"conversion":{"strategy":"None","webhook":null}}}"#,
            ])
            .await?;
        cluster
            .apply_file(paths.root.join("examples/crd.yaml"))
            .await?;
    }
    Ok(())
}

/// The host name in the webhook URLs, as the cluster's API server reaches this machine:
/// `KOPF_E2E_WEBHOOK_HOST` if set; the default (`localhost`) for the fake API server, a
/// process here; the gateway of kind's container network for kind.
async fn webhook_host(cluster: &Cluster) -> Result<Option<String>> {
    if let Ok(host) = std::env::var("KOPF_E2E_WEBHOOK_HOST") {
        return Ok(Some(host));
    }
    match cluster.kind() {
        ClusterKind::Fake => Ok(None),
        ClusterKind::Kind => {
            for engine in ["docker", "podman"] {
                let out = tokio::process::Command::new(engine)
                    .args([
                        "network",
                        "inspect",
                        "kind",
                        "--format",
                        "{{range .IPAM.Config}}{{.Gateway}} {{end}}",
                    ])
                    .output()
                    .await;
                if let Ok(out) = out
                    && out.status.success()
                {
                    let text = String::from_utf8_lossy(&out.stdout).into_owned();
                    if let Some(ip) = text.split_whitespace().find(|a| !a.contains(':')) {
                        return Ok(Some(ip.to_string()));
                    }
                }
            }
            bail!(
                "cannot find the gateway of kind's container network (`docker network inspect kind`); set KOPF_E2E_WEBHOOK_HOST to an address of this machine that the kind nodes reach"
            )
        }
        ClusterKind::Current => bail!(
            "the webhooks need an address of this machine that the cluster's API server reaches: set KOPF_E2E_WEBHOOK_HOST (or skip this example: --example NAME for the others)"
        ),
    }
}

/// The object for messages, without the bulky managedFields and last-applied annotation.
fn brief(mut object: Value) -> String {
    if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("managedFields");
        if let Some(a) = meta.get_mut("annotations").and_then(Value::as_object_mut) {
            a.remove("kubectl.kubernetes.io/last-applied-configuration");
        }
    }
    object.to_string()
}

/// `examples/obj.yaml` renamed, with the scenario's edits.
fn object_yaml(template: &str, name: &str, edits: &[(&str, &str)]) -> Result<String> {
    let rename = format!("name: {name}");
    let mut text = template.to_string();
    for (from, to) in
        std::iter::once(("name: kopf-example-1", rename.as_str())).chain(edits.iter().copied())
    {
        if text.matches(from).count() != 1 {
            bail!("examples/obj.yaml no longer has exactly one `{from}` to replace");
        }
        text = text.replace(from, to);
    }
    Ok(text)
}

/// Removes the object even if no operator releases its finalizer (after a failure).
async fn force_delete(cluster: &Cluster, name: &str) {
    let object = [RESOURCE, name, "-n", NAMESPACE];
    let _ = cluster
        .kubectl(
            ["delete"]
                .iter()
                .chain(&object)
                .chain(&["--ignore-not-found", "--wait=false"]),
        )
        .await;
    let _ = cluster
        .kubectl(["patch"].iter().chain(&object).chain(&[
            "--type",
            "merge",
            "-p",
            r#"{"metadata":{"finalizers":null}}"#,
        ]))
        .await;
}

/// The workspace root and the binaries' paths, from `cargo metadata`.
fn locate() -> Result<Paths> {
    let meta = crate::cargo_metadata()?;
    let field = |k: &str| {
        meta[k]
            .as_str()
            .map(PathBuf::from)
            .ok_or_else(|| anyhow!("`cargo metadata` has no {k}"))
    };
    let root = field("workspace_root")?;
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .map_or_else(|| field("target_directory"), Ok)?;
    let debug = target.join("debug");
    Ok(Paths {
        root,
        kopf: debug.join("kopf"),
        examples: debug.join("examples"),
    })
}

/// The example operators: crates/kopf/examples/*.rs.
fn example_names(root: &Path) -> Result<Vec<String>> {
    let dir = root.join("crates/kopf/examples");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .with_context(|| format!("listing {}", dir.display()))?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "rs"))
        .filter_map(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .collect();
    // The table's order first (simple to complex), then any others.
    names.sort_by_key(|n| {
        (
            SCENARIOS
                .iter()
                .position(|s| s.example == n)
                .unwrap_or(usize::MAX),
            n.clone(),
        )
    });
    Ok(names)
}

/// The build CI already did (a no-op there), plus the `kopf` binary.
fn build(root: &Path) -> Result<()> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    for args in [
        &["test", "--workspace", "--no-run", "--locked"][..],
        &["build", "--locked", "-p", "kopf-cli"][..],
    ] {
        println!("e2e: cargo {}", args.join(" "));
        let status = StdCommand::new(&cargo)
            .args(args)
            .current_dir(root)
            .status()
            .with_context(|| format!("running cargo {}", args.join(" ")))?;
        if !status.success() {
            bail!("`cargo {}` failed ({status})", args.join(" "));
        }
    }
    Ok(())
}
