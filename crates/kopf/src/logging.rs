//! Log output in Kopf's formats, with `tracing`:
//!
//! * `plain`: `[namespace/name] message`;
//! * `full` (the default): `[2026-11-23 12:00:00,123] kopf.objects         [INFO    ] [namespace/name] message`;
//! * `json`: one object per line with `message`, `timestamp`, `severity`, `logger`, and the
//!   object reference (`namespace`, `name`, `kind`, `uid`) under `--log-refkey` (default
//!   `object`).
//!
//! Lines about an object are those logged inside its processing span (or by the `Logger`
//! extractor); `--no-log-prefix` drops the `[namespace/name]` prefix of text formats.

use std::collections::BTreeMap;
use std::fmt;

use serde_json::{Value, json};
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

use crate::cli::{LogFormat, RunArgs};

mod output;

/// How long the end of a run waits for the spans ended so far to be exported.
#[cfg(feature = "otel")]
const OTEL_SHUTDOWN_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Waits (up to 2 s) until every line logged so far is written to stderr, and, with the
/// `otel` feature exporting, (up to 2 s) until the spans ended so far are exported. The
/// operator calls it before it exits on a second stop signal or at its hard deadline; call
/// it before a `std::process::exit` of your own.
///
/// ```
/// kopf::tracing::info!("the last words");
/// kopf::logging::flush();
/// ```
pub fn flush() {
    #[cfg(feature = "otel")]
    crate::otel::flush(std::time::Duration::from_secs(2));
    output::flush_lines();
}

/// At the end of a run, or while unwinding from a panic: exports the spans ended so far
/// and stops the exporter (`otel` feature), then writes every line logged.
pub(crate) struct FlushOnDrop;

impl Drop for FlushOnDrop {
    fn drop(&mut self) {
        #[cfg(feature = "otel")]
        crate::otel::shutdown(OTEL_SHUTDOWN_WAIT);
        output::flush_lines();
    }
}

/// Log directives that quieten kube's own reports of failed requests, watches and
/// undecodable answers (kube-client logs whole response bodies, megabytes for a list): the
/// operator reports these failures itself, with a bounded excerpt. They show with `--debug`.
pub const KUBE_QUIET: &str =
    "kube_client::client::builder=off,kube_client::client=error,kube_runtime::watcher=error";

/// Installs the log subscriber for the chosen verbosity and format (a second call keeps the
/// first subscriber, e.g. in tests). `RUST_LOG` overrides the verbosity. Lines go to stderr
/// from a thread of their own (see [`flush`]).
pub fn init(args: &RunArgs) {
    let default = if args.debug {
        "debug".to_string()
    } else if args.verbose {
        format!("info,kopf=debug,kopf_core=debug,kopf_watch=debug,kopf.objects=debug,{KUBE_QUIET}")
    } else if args.quiet {
        format!("warn,{KUBE_QUIET}")
    } else {
        format!("info,{KUBE_QUIET}")
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let format = KopfFormat {
        format: args.log_format,
        prefix: args.log_prefix(),
        refkey: args.log_refkey.clone(),
    };
    let logs = tracing_subscriber::registry()
        .with(filter)
        .with(ObjectSpans)
        .with(
            tracing_subscriber::fmt::layer()
                .fmt_fields(NoSpanFields)
                .event_format(format)
                .with_writer(output::Stderr),
        );
    #[cfg(feature = "otel")]
    {
        // Exporting when an endpoint is configured; one line says which.
        let otel = crate::otel::from_env();
        if logs.with(otel.layer).try_init().is_ok() {
            crate::otel::install(otel.provider);
            match otel.level {
                Level::WARN => tracing::warn!("{}", otel.note),
                _ => tracing::info!("{}", otel.note),
            }
        } else if let Some(provider) = otel.provider {
            // Another subscriber was there first: this one's exporter has nothing to do.
            let _ = provider.shutdown();
        }
    }
    #[cfg(not(feature = "otel"))]
    let _ = logs.try_init();
}

/// The fields of spans are not formatted: Kopf's formats take the object from
/// [`ObjectSpans`] and the rest from the event, so formatting them into a string for every
/// span (the `fmt` layer's default) would be work for nothing.
struct NoSpanFields;

impl<'w> FormatFields<'w> for NoSpanFields {
    fn format_fields<R: tracing_subscriber::field::RecordFields>(
        &self,
        _writer: Writer<'w>,
        _fields: R,
    ) -> fmt::Result {
        Ok(())
    }
}

/// The object a span is about, recorded from the span's fields.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ObjectRef {
    /// `metadata.namespace` (empty for cluster-scoped objects).
    pub namespace: String,
    /// `metadata.name`.
    pub name: String,
    /// `kind`.
    pub kind: String,
    /// `metadata.uid`.
    pub uid: String,
}

impl ObjectRef {
    fn is_empty(&self) -> bool {
        self.name.is_empty()
    }

    fn prefix(&self) -> String {
        if self.namespace.is_empty() {
            format!("[{}]", self.name)
        } else {
            format!("[{}/{}]", self.namespace, self.name)
        }
    }

    fn to_json(&self) -> Value {
        let mut m = serde_json::Map::new();
        for (k, v) in [
            ("kind", &self.kind),
            ("namespace", &self.namespace),
            ("name", &self.name),
            ("uid", &self.uid),
        ] {
            if !v.is_empty() {
                m.insert(k.into(), Value::String(v.clone()));
            }
        }
        Value::Object(m)
    }
}

impl Visit for ObjectRef {
    fn record_str(&mut self, field: &Field, value: &str) {
        if let Some(slot) = self.slot(field.name()) {
            *slot = value.to_string();
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        // Only the object's fields are formatted (a cycle's span has more).
        if let Some(slot) = self.slot(field.name()) {
            *slot = format!("{value:?}");
        }
    }
}

impl ObjectRef {
    fn slot(&mut self, field: &str) -> Option<&mut String> {
        match field {
            "namespace" => Some(&mut self.namespace),
            "name" => Some(&mut self.name),
            "kind" => Some(&mut self.kind),
            "uid" => Some(&mut self.uid),
            _ => None,
        }
    }

    fn set(&mut self, field: &str, value: String) {
        if let Some(slot) = self.slot(field) {
            *slot = value;
        }
    }
}

/// Records the object of every `object` span (the engine's per-object processing span).
struct ObjectSpans;

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for ObjectSpans {
    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        id: &tracing::span::Id,
        ctx: Context<'_, S>,
    ) {
        if attrs.metadata().name() != "object" {
            return;
        }
        let mut object = ObjectRef::default();
        attrs.record(&mut object);
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(object);
        }
    }
}

/// An event's message and other fields.
#[derive(Default)]
struct Fields {
    message: String,
    object: ObjectRef,
    extra: BTreeMap<String, String>,
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.put(field.name(), value.to_string());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.put(field.name(), format!("{value:?}"));
    }
}

impl Fields {
    fn put(&mut self, field: &str, value: String) {
        match field {
            "message" => self.message = value,
            "namespace" | "name" | "kind" | "uid" => self.object.set(field, value),
            other => {
                self.extra.insert(other.to_string(), value);
            }
        }
    }
}

/// Formats events as Kopf does.
struct KopfFormat {
    format: LogFormat,
    prefix: bool,
    refkey: String,
}

/// Python's level names, as Kopf prints them.
fn level_name(level: &Level) -> &'static str {
    match *level {
        Level::ERROR => "ERROR",
        Level::WARN => "WARNING",
        Level::INFO => "INFO",
        Level::DEBUG | Level::TRACE => "DEBUG",
    }
}

fn severity(level: &Level) -> &'static str {
    match *level {
        Level::ERROR => "error",
        Level::WARN => "warning",
        Level::INFO => "info",
        Level::DEBUG => "debug",
        Level::TRACE => "debug",
    }
}

impl<S, N> FormatEvent<S, N> for KopfFormat
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let mut fields = Fields::default();
        event.record(&mut fields);
        // The innermost object span names the object, unless the event names one itself.
        let from_span = ctx.event_scope().and_then(|scope| {
            scope
                .from_root()
                .filter_map(|span| span.extensions().get::<ObjectRef>().cloned())
                .last()
        });
        let object = if fields.object.is_empty() {
            from_span.unwrap_or_default()
        } else {
            fields.object.clone()
        };
        let meta = event.metadata();
        let logger = if object.is_empty() {
            meta.target().replace("::", ".")
        } else {
            "kopf.objects".to_string()
        };
        let now = jiff::Timestamp::now();
        if self.format == LogFormat::Json {
            let mut line = json!({
                "message": fields.message,
                "timestamp": now.to_string(),
                "severity": severity(meta.level()),
                "logger": logger,
            });
            if !object.is_empty() {
                line[&self.refkey] = object.to_json();
            }
            // Extra fields never replace the line's own keys.
            if let Some(m) = line.as_object_mut() {
                for (k, v) in &fields.extra {
                    m.entry(k.clone())
                        .or_insert_with(|| Value::String(v.clone()));
                }
            }
            return writeln!(writer, "{line}");
        }
        if self.format == LogFormat::Full {
            write!(
                writer,
                "[{},{:03}] {:<20.20} [{:<8.8}] ",
                now.strftime("%Y-%m-%d %H:%M:%S"),
                now.subsec_millisecond(),
                logger,
                level_name(meta.level())
            )?;
        }
        if self.prefix && !object.is_empty() {
            write!(writer, "{} ", object.prefix())?;
        }
        write!(writer, "{}", fields.message)?;
        for (k, v) in &fields.extra {
            write!(writer, " {k}={v}")?;
        }
        writeln!(writer)
    }
}

/// Log lines kept in memory, shared by every clone: the writer a test's subscriber writes to
/// and the test reads back (`kopf::testing`'s `OperatorTest` captures an operator's lines in
/// one).
///
/// ```
/// use kopf::logging::LogBuffer;
///
/// let (logs, guard) = LogBuffer::capture();
/// kopf::tracing::warn!("the disk is full");
/// drop(guard);
/// assert_eq!(logs.matching("WARN", "disk").len(), 1);
/// ```
#[derive(Clone, Default, Debug)]
pub struct LogBuffer(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for LogBuffer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl LogBuffer {
    /// Captures this thread's logs, as the operator's default level shows them (INFO and
    /// above, kube's own reports quietened: [`KUBE_QUIET`]), until the guard is dropped.
    /// Tasks of a current-thread runtime log on the test's thread.
    pub fn capture() -> (LogBuffer, tracing::subscriber::DefaultGuard) {
        // Tests running in parallel with thread-local subscribers, and some without one, can
        // leave a log statement's cached interest at "never" (tracing-core's callsite cache):
        // a global subscriber that wants the same levels prevents it.
        static GLOBAL: std::sync::Once = std::sync::Once::new();
        GLOBAL.call_once(|| {
            let sink = tracing_subscriber::fmt()
                .with_writer(std::io::sink)
                .with_max_level(Level::INFO)
                .finish();
            let _ = tracing::subscriber::set_global_default(sink);
        });
        let logs = LogBuffer::default();
        let writer = logs.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .with_env_filter(EnvFilter::new(format!("info,{KUBE_QUIET}")))
            .finish();
        (logs, tracing::subscriber::set_default(subscriber))
    }

    /// How many bytes were logged so far (a cheap sign of activity).
    pub fn written(&self) -> usize {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// The text logged so far.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap_or_else(|e| e.into_inner())).into_owned()
    }

    /// The lines logged so far.
    pub fn lines(&self) -> Vec<String> {
        self.text().lines().map(String::from).collect()
    }

    /// The lines of a level (`INFO`, `WARN`, `ERROR`) that contain `text`.
    pub fn matching(&self, level: &str, text: &str) -> Vec<String> {
        self.lines()
            .into_iter()
            .filter(|l| l.contains(level) && l.contains(text))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn capture(format: LogFormat, prefix: bool) -> String {
        let buffer = LogBuffer::default();
        let out = buffer.clone();
        let subscriber = tracing_subscriber::registry().with(ObjectSpans).with(
            tracing_subscriber::fmt::layer()
                .fmt_fields(NoSpanFields)
                .event_format(KopfFormat {
                    format,
                    prefix,
                    refkey: "k8s".into(),
                })
                .with_writer(move || out.clone()),
        );
        tracing::subscriber::with_default(subscriber, || {
            tracing::info!(resource = "kopfexamples", "watching");
            // A cycle's span: the object's fields and others, which no format shows.
            let span = tracing::info_span!(
                "object",
                namespace = "default",
                name = "kex-1",
                kind = "KopfExample",
                uid = "u-1",
                resource = "kopfexamples",
                reason = tracing::field::Empty,
            );
            span.record("reason", "create");
            span.in_scope(|| tracing::warn!("Handler 'create_fn' failed temporarily: later"));
            // A handler's `Logger`, outside any span (a handler may log from its own task).
            let body = json!({"kind": "KopfExample", "metadata": {"namespace": "default", "name": "kex-2", "uid": "u-2"}});
            kopf_core::extract::Logger::for_body(&body).info("from the handler");
        });
        buffer.text()
    }

    #[test]
    fn plain_full_and_json() {
        let plain = capture(LogFormat::Plain, true);
        assert_eq!(
            plain,
            "watching resource=kopfexamples\n[default/kex-1] Handler 'create_fn' failed temporarily: later\n[default/kex-2] from the handler\n"
        );
        assert!(!capture(LogFormat::Plain, false).contains("[default/kex-1]"));
        let full = capture(LogFormat::Full, true);
        let second = full.lines().nth(1).unwrap_or_default();
        assert!(
            second.contains("] kopf.objects         [WARNING ] [default/kex-1] Handler"),
            "{second}"
        );
        let json = capture(LogFormat::Json, false);
        let lines: Vec<Value> = json
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or(Value::Null))
            .collect();
        assert_eq!(lines[0]["message"], "watching");
        assert_eq!(lines[0]["resource"], "kopfexamples");
        assert!(lines[0].get("k8s").is_none());
        assert_eq!(lines[1]["severity"], "warning");
        assert_eq!(
            lines[1]["k8s"],
            json!({"kind": "KopfExample", "namespace": "default", "name": "kex-1", "uid": "u-1"})
        );
        // The Logger's lines carry the object as the framework's do, and nothing else.
        assert_eq!(lines[2]["logger"], "kopf.objects");
        assert_eq!(
            lines[2]["k8s"],
            json!({"kind": "KopfExample", "namespace": "default", "name": "kex-2", "uid": "u-2"})
        );
        assert_eq!(
            lines[2].as_object().map(|o| o.len()),
            Some(5),
            "{}",
            lines[2]
        );
    }
}
