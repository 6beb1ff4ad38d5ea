//! The server's log: `tracing` events, one line each on stderr, in text or JSON.
//!
//! Every event is a `tracing` event whose message is the event's name (`connect`, `summary`, ...) and whose
//! fields are its fields; the server library's own events (`blockwell_server`, such as `accept_error`) come
//! out the same way. Fields recorded with `?` whose text is a JSON object, array, string or `null` ([`Json`])
//! are kept as JSON, so counters nest in JSON lines and flatten to `cache.read_block_hits=12` in text.
//!
//! Lines go through a bounded queue to a writer thread: a connection thread never waits for stderr. When the
//! reader of stderr falls [`QUEUED_LINES`] lines behind, further lines are dropped and counted
//! ([`dropped_lines`], the `blockwell_log_lines_dropped_total` series) instead of stalling the server.

use serde_json::{Map, Value};
use std::fmt::{self, Write as _};
use std::io::Write as _;
use std::sync::OnceLock;
use tracing::field::{Field, Visit};
use tracing::level_filters::LevelFilter;
use tracing::{Event, Level, Subscriber};
use tracing_appender::non_blocking::{ErrorCounter, NonBlocking, NonBlockingBuilder, WorkerGuard};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::Layer;

/// Log line format.
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LogFormat {
    /// `blockwell: <event> key=value ...`
    #[default]
    Text,
    /// One JSON object per line: `{"event":…,"level":…,"ts":…,…}`.
    Json,
}

/// The least severe events written (`--log-level`).
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LogLevel {
    Error,
    Warn,
    /// Start, stop, connections, reloads and summaries (the default).
    #[default]
    Info,
    /// Also the server library's diagnostics (a connection's error, a thread that stays normal).
    Debug,
    Trace,
}

impl From<LogLevel> for LevelFilter {
    fn from(l: LogLevel) -> LevelFilter {
        match l {
            LogLevel::Error => LevelFilter::ERROR,
            LogLevel::Warn => LevelFilter::WARN,
            LogLevel::Info => LevelFilter::INFO,
            LogLevel::Debug => LevelFilter::DEBUG,
            LogLevel::Trace => LevelFilter::TRACE,
        }
    }
}

/// Lines the queue to stderr holds before it drops new ones.
pub const QUEUED_LINES: usize = 65_536;

static DROPPED: OnceLock<ErrorCounter> = OnceLock::new();

/// Lines dropped so far because stderr's reader fell behind.
pub fn dropped_lines() -> u64 {
    DROPPED.get().map_or(0, |c| c.dropped_lines() as u64)
}

/// Installs the log for this process. Keep the guard until the end: dropping it writes out what is queued.
/// A second call (a log already installed) changes nothing and returns None.
pub fn init(format: LogFormat, level: LogLevel) -> Option<WorkerGuard> {
    let (writer, guard) =
        NonBlockingBuilder::default().lossy(true).buffered_lines_limit(QUEUED_LINES).finish(std::io::stderr());
    let counter = writer.error_counter();
    let subscriber =
        tracing_subscriber::registry().with(Lines { format, writer }.with_filter(LevelFilter::from(level)));
    tracing::subscriber::set_global_default(subscriber).ok()?;
    let _ = DROPPED.set(counter);
    Some(guard)
}

/// A JSON value as a `tracing` field: `field = ?Json(value)`.
pub struct Json(pub Value);

impl fmt::Debug for Json {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Writes each event as one line.
struct Lines {
    format: LogFormat,
    writer: NonBlocking,
}

impl<S: Subscriber> Layer<S> for Lines {
    fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
        let mut v = Fields::default();
        event.record(&mut v);
        let mut line = format_line(self.format, *event.metadata().level(), &v.event, v.fields, now());
        line.push('\n');
        // One write per line: the queue keeps lines whole (and drops whole lines when full).
        let _ = self.writer.clone().write_all(line.as_bytes());
    }
}

fn now() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}

/// An event's name (its message) and fields.
#[derive(Default)]
struct Fields {
    event: String,
    fields: Map<String, Value>,
}

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        let text = format!("{value:?}");
        if field.name() == "message" {
            self.event = text;
            return;
        }
        let v = if text.starts_with(['{', '[', '"']) || text == "null" {
            serde_json::from_str(&text).unwrap_or(Value::String(text))
        } else {
            Value::String(text)
        };
        self.fields.insert(field.name().into(), v);
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.event = value.into();
        } else {
            self.fields.insert(field.name().into(), value.into());
        }
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.fields.insert(field.name().into(), value.into());
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.fields.insert(field.name().into(), value.into());
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.fields.insert(field.name().into(), value.into());
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.fields.insert(field.name().into(), value.into());
    }
}

fn level_name(level: Level) -> &'static str {
    match level {
        Level::ERROR => "error",
        Level::WARN => "warn",
        Level::INFO => "info",
        Level::DEBUG => "debug",
        Level::TRACE => "trace",
    }
}

/// One line (without the newline). JSON: `event`, `level`, `ts` (Unix seconds, ms precision) and the fields,
/// keys in alphabetical order. Text: `blockwell: <event>`, then `level=` unless the event is info, then the
/// fields as `key=value` (strings with spaces quoted, nested objects flattened to `key.inner=value`).
fn format_line(format: LogFormat, level: Level, event: &str, mut fields: Map<String, Value>, ts: f64) -> String {
    match format {
        LogFormat::Json => {
            fields.insert("ts".into(), ((ts * 1000.0).round() / 1000.0).into());
            fields.insert("event".into(), event.into());
            fields.insert("level".into(), level_name(level).into());
            Value::Object(fields).to_string()
        }
        LogFormat::Text => {
            let mut s = format!("blockwell: {event}");
            if level != Level::INFO {
                let _ = write!(s, " level={}", level_name(level));
            }
            for (k, v) in fields {
                match v {
                    Value::String(x) if !x.contains(char::is_whitespace) && !x.is_empty() => {
                        let _ = write!(s, " {k}={x}");
                    }
                    Value::Object(m) => {
                        for (k2, v2) in m {
                            let _ = write!(s, " {k}.{k2}={v2}");
                        }
                    }
                    _ => {
                        let _ = write!(s, " {k}={v}");
                    }
                }
            }
            s
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::sync::{Arc, Mutex};

    fn fields(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn json_lines_carry_event_level_time_and_nested_fields() {
        let f = fields(json!({"conn": 3, "cache": {"hits": 2}, "peer": "1.2.3.4:5"}));
        let line = format_line(LogFormat::Json, Level::INFO, "summary", f, 1_700_000_000.123_456);
        let v: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["event"], "summary");
        assert_eq!(v["level"], "info");
        assert_eq!(v["ts"], 1_700_000_000.123);
        assert_eq!(v["cache"]["hits"], 2);
        assert_eq!(v["peer"], "1.2.3.4:5");
        assert!(line.starts_with(r#"{"cache":"#), "keys sorted: {line}");
    }

    #[test]
    fn text_lines_quote_spaces_flatten_objects_and_name_non_info_levels() {
        let f = fields(json!({"error": "connection reset", "cache": {"hits": 2}, "conn": 1, "x": null}));
        assert_eq!(
            format_line(LogFormat::Text, Level::WARN, "disconnect", f, 0.0),
            r#"blockwell: disconnect level=warn cache.hits=2 conn=1 error="connection reset" x=null"#
        );
        assert_eq!(format_line(LogFormat::Text, Level::INFO, "stop", Map::new(), 0.0), "blockwell: stop");
    }

    /// The fields of a real `tracing` event, through the visitor: numbers stay numbers, `?Json` stays JSON,
    /// Display values become strings.
    #[test]
    fn tracing_events_keep_their_field_types() {
        #[derive(Clone, Default)]
        struct Seen(Arc<Mutex<Vec<Fields>>>);
        impl<S: Subscriber> Layer<S> for Seen {
            fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
                let mut v = Fields::default();
                event.record(&mut v);
                self.0.lock().unwrap().push(v);
            }
        }
        let seen = Seen::default();
        let subscriber = tracing_subscriber::registry().with(seen.clone());
        tracing::subscriber::with_default(subscriber, || {
            let peer = std::net::SocketAddr::from(([127, 0, 0, 1], 9));
            tracing::info!(conn = 7u64, peer = %peer, tls = true, path = ?Json(json!("a b")), cache = ?Json(json!({"a": 1})), none = ?Json(serde_json::Value::Null), "open");
        });
        let got = seen.0.lock().unwrap();
        assert_eq!(got[0].event, "open");
        assert_eq!(
            Value::Object(got[0].fields.clone()),
            json!({"conn": 7, "peer": "127.0.0.1:9", "tls": true, "path": "a b", "cache": {"a": 1}, "none": null})
        );
    }
}
