//! Log lines in the shapes Kubernetes log pipelines already parse: klog's text header by default
//! (`I1126 02:38:30.756391    6744 elector.rs:231] "Lease released" lease="ns/name"`), and with
//! `--logging-format=json` component-base's JSON (`ts` in seconds, `caller`, `msg`, `v` for
//! everything but errors, then the key/values). An error's cause is `err` in both, as klog
//! writes it. The fields of the spans an event is in (the claim or PV a pass works on) follow
//! the event's own.

use std::fmt::{self, Write as _};

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::{JsonFields, Writer};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, FormattedFields};
use tracing_subscriber::registry::LookupSpan;

/// klog's verbosity at which a line of this level shows (`-v`, see `Config::log_level`).
fn verbosity(level: &Level) -> u8 {
    match *level {
        Level::TRACE => 5,
        Level::DEBUG => 2,
        _ => 0,
    }
}

/// The file name and line, as klog's header and component-base's `caller` give them.
fn caller(event: &Event<'_>) -> String {
    let meta = event.metadata();
    let file = meta.file().unwrap_or("?");
    let base = file.rsplit('/').next().unwrap_or(file);
    format!("{base}:{}", meta.line().unwrap_or(0))
}

/// An event's message and its other fields, each as text and as JSON.
#[derive(Default)]
struct Fields {
    message: String,
    pairs: Vec<(String, serde_json::Value)>,
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.put(field, serde_json::Value::from(value));
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.put(field, serde_json::Value::from(value));
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.put(field, serde_json::Value::from(value));
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.put(field, serde_json::Value::from(value));
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.put(field, serde_json::Value::from(value));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.put(field, serde_json::Value::from(format!("{value:?}")));
    }
}

impl Fields {
    fn of(event: &Event<'_>) -> Fields {
        let mut fields = Fields::default();
        event.record(&mut fields);
        fields
    }

    fn put(&mut self, field: &Field, value: serde_json::Value) {
        if field.name() == "message" {
            self.message = match value {
                serde_json::Value::String(text) => text,
                other => other.to_string(),
            };
        } else {
            self.pairs.push((field.name().to_string(), value));
        }
    }
}

/// klog's text header and structured tail.
pub struct KlogText;

impl<S, N> FormatEvent<S, N> for KlogText
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
        let letter = match *event.metadata().level() {
            Level::ERROR => 'E',
            Level::WARN => 'W',
            _ => 'I',
        };
        let now = k8s_openapi::jiff::Timestamp::now().strftime("%m%d %H:%M:%S%.6f");
        let pid = std::process::id();
        write!(writer, "{letter}{now} {pid:>7} {}] ", caller(event))?;
        let fields = Fields::of(event);
        write!(writer, "{:?}", fields.message)?;
        for (key, value) in &fields.pairs {
            write!(writer, " {}={}", klog_key(key), klog_value(value))?;
        }
        if let Some(scope) = ctx.event_scope() {
            for span in scope.from_root() {
                let extensions = span.extensions();
                if let Some(spanned) = extensions.get::<FormattedFields<N>>()
                    && !spanned.is_empty()
                {
                    write!(writer, " {spanned}")?;
                }
            }
        }
        writeln!(writer)
    }
}

/// A key as the Go sidecars write it: an error's cause is `err` (klog's ErrorS, and the key
/// they pass to InfoS), whatever the level.
fn klog_key(key: &str) -> &str {
    if key == "error" { "err" } else { key }
}

/// A value as klog writes it: numbers and booleans bare, the rest quoted.
fn klog_value(value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::String(text) => format!("{text:?}"),
        other => other.to_string(),
    }
}

/// component-base's JSON lines. The spans' fields must be recorded as JSON (`JsonFields`).
pub struct ComponentJson;

impl<S> FormatEvent<S, JsonFields> for ComponentJson
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, JsonFields>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let level = event.metadata().level();
        let now = k8s_openapi::jiff::Timestamp::now();
        let ts = now.as_microsecond() as f64 / 1e6;
        let fields = Fields::of(event);
        let mut line = String::new();
        let text = |v: &str| serde_json::Value::from(v).to_string();
        write!(
            line,
            "{{\"ts\":{ts:.6},\"caller\":{},\"msg\":{}",
            text(&caller(event)),
            text(&fields.message)
        )?;
        let error = *level == Level::ERROR;
        if !error {
            write!(line, ",\"v\":{}", verbosity(level))?;
        }
        let mut pairs = fields.pairs;
        if let Some(scope) = ctx.event_scope() {
            for span in scope.from_root() {
                let extensions = span.extensions();
                let Some(spanned) = extensions.get::<FormattedFields<JsonFields>>() else {
                    continue;
                };
                if let Ok(serde_json::Value::Object(map)) = serde_json::from_str(spanned) {
                    pairs.extend(map);
                }
            }
        }
        for (key, value) in pairs {
            write!(line, ",{}:{value}", text(klog_key(&key)))?;
        }
        writeln!(writer, "{line}}}")
    }
}

tokio::task_local! {
    /// Whether the pass running in this task has recorded its `op` already.
    static OP_RECORDED: std::cell::Cell<bool>;
}

/// Runs one pass over a key, in which `record_op` records the span's `op` once.
pub async fn pass_with_op<F: std::future::Future>(pass: F) -> F::Output {
    OP_RECORDED.scope(std::cell::Cell::new(false), pass).await
}

/// Records `op` on the current span, the first time in this pass: a second record would be
/// appended to every line, not replace the first. Outside a pass it records every time.
pub fn record_op(op: &'static str) {
    let first = OP_RECORDED.try_with(|recorded| !recorded.replace(true)).unwrap_or(true);
    if first {
        tracing::Span::current().record("op", op);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use tracing_subscriber::fmt::MakeWriter;

    use super::*;

    /// A writer that keeps what the subscriber writes.
    #[derive(Clone, Default)]
    struct Kept(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Kept {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap_or_else(|p| p.into_inner()).extend_from_slice(bytes);
            Ok(bytes.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'a> MakeWriter<'a> for Kept {
        type Writer = Kept;

        fn make_writer(&'a self) -> Kept {
            self.clone()
        }
    }

    impl Kept {
        fn lines(&self) -> Vec<String> {
            let bytes = self.0.lock().unwrap_or_else(|p| p.into_inner()).clone();
            String::from_utf8_lossy(&bytes).lines().map(str::to_string).collect()
        }
    }

    fn log_some_lines() {
        let span = tracing::info_span!("sync", claim = "ns/data");
        let _in = span.enter();
        tracing::info!(lease = "ns/l", tries = 3, "Lease released");
        tracing::warn!(error = "boom", "cannot renew the Lease");
        tracing::error!(error = "boom", "cannot start");
        tracing::debug!("only at -v=2");
    }

    #[test]
    fn text_lines_have_klogs_header() {
        let kept = Kept::default();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .event_format(KlogText)
            .with_max_level(Level::INFO)
            .with_writer(kept.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, log_some_lines);
        let lines = kept.lines();
        assert_eq!(lines.len(), 3, "{lines:?}");
        let pid = std::process::id();
        // I1126 02:38:30.756391    6744 logs.rs:201] "Lease released" lease="ns/l" tries=3 ...
        let header = |line: &str, letter: char| {
            let (head, tail) = line.split_once("] ").unwrap_or_else(|| panic!("{line}"));
            let parts: Vec<&str> = head.split_whitespace().collect();
            assert_eq!(parts.len(), 4, "{line}");
            assert!(parts[0].starts_with(letter) && parts[0].len() == 5, "{line}");
            assert_eq!(parts[1].len(), "02:38:30.756391".len(), "{line}");
            assert_eq!(parts[2], pid.to_string(), "{line}");
            assert!(parts[3].starts_with("logs.rs:"), "{line}");
            tail.to_string()
        };
        assert_eq!(
            header(&lines[0], 'I'),
            "\"Lease released\" lease=\"ns/l\" tries=3 claim=\"ns/data\""
        );
        assert!(header(&lines[1], 'W').starts_with("\"cannot renew the Lease\" err=\"boom\""));
        assert!(header(&lines[2], 'E').starts_with("\"cannot start\""));
    }

    #[test]
    fn json_lines_have_component_bases_shape() {
        let kept = Kept::default();
        let subscriber = tracing_subscriber::fmt()
            .fmt_fields(JsonFields::new())
            .event_format(ComponentJson)
            .with_max_level(Level::DEBUG)
            .with_writer(kept.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, log_some_lines);
        let lines: Vec<serde_json::Value> = kept
            .lines()
            .iter()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect();
        assert_eq!(lines.len(), 4);
        let info = &lines[0];
        assert!(info["ts"].as_f64().is_some_and(|t| t > 1.7e9), "{info}");
        assert!(info["caller"].as_str().is_some_and(|c| c.starts_with("logs.rs:")), "{info}");
        assert_eq!(info["msg"], "Lease released");
        assert_eq!(info["v"], 0);
        assert_eq!((&info["lease"], &info["tries"]), (&"ns/l".into(), &3.into()));
        assert_eq!(info["claim"], "ns/data", "span fields are key/values too");
        assert_eq!((&lines[1]["v"], &lines[1]["err"]), (&0.into(), &"boom".into()));
        let error = &lines[2];
        assert!(error.get("v").is_none(), "errors carry no v: {error}");
        assert_eq!(error["err"], "boom");
        assert_eq!(lines[3]["v"], 2);
    }
}
