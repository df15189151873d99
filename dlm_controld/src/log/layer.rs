//! The `tracing` layer that turns events into the C daemon's log lines (logging.c
//! `log_level`) and, with `--log-format json`, into JSON objects with every field.
//!
//! Code logs with `tracing` macros and fields (`tracing::debug!(nodeid, "...")`); a lockspace
//! task is polled with its name set ([`super::in_lockspace`]; a `lockspace` span with an
//! `ls` field does the same), so its events carry the name without formatting it into each
//! message. Events with target
//! [`PLOCK_TARGET`] are C's plock-only lines (the `dlm_tool log_plock` ring, LOG_NONE);
//! with [`PLOCK_DEBUG_TARGET`], C's `log_dlock` lines (both rings).

use std::fmt::{self, Write as _};

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id};
use tracing::{Event, Level as TLevel, Subscriber};
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;

/// Target of plock-only lines (`log_plock`: the plock ring, nothing else).
pub const PLOCK_TARGET: &str = "dlm_controld::plock";

/// Target of C's `log_dlock` lines: the debug ring and the plock ring both (and the sinks
/// as any debug line).
pub const PLOCK_DEBUG_TARGET: &str = "dlm_controld::plock_debug";

/// Target of lines C writes with `log_debug`/`log_error` (no lockspace name in the text)
/// from code that runs for a lockspace: the name stays a field (JSON) but is not printed.
pub const PLAIN_TARGET: &str = "dlm_controld::daemon";

/// One field's value, kept typed for JSON.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// A string or a `Display`/`Debug` rendering.
    Str(String),
    /// An unsigned integer.
    U64(u64),
    /// A signed integer.
    I64(i64),
    /// A boolean.
    Bool(bool),
}

impl Value {
    fn json(&self) -> serde_json::Value {
        match self {
            Self::Str(s) => serde_json::Value::from(s.as_str()),
            Self::U64(n) => serde_json::Value::from(*n),
            Self::I64(n) => serde_json::Value::from(*n),
            Self::Bool(b) => serde_json::Value::from(*b),
        }
    }
}

/// The fields of an event or span, `message` apart.
#[derive(Debug, Default, Clone)]
pub struct Fields {
    /// The formatted message.
    pub message: String,
    /// Every other field, in the order given.
    pub rest: Vec<(&'static str, Value)>,
}

impl Fields {
    /// A field by name.
    pub fn get(&self, name: &str) -> Option<&Value> {
        self.rest.iter().find(|(n, _)| *n == name).map(|(_, v)| v)
    }

    fn put(&mut self, field: &Field, v: Value) {
        if field.name() == "message" {
            match v {
                Value::Str(s) => self.message = s,
                other => self.message = format!("{other:?}"),
            }
        } else {
            self.rest.push((field.name(), v));
        }
    }
}

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        let mut s = String::new();
        let _ = write!(s, "{value:?}");
        self.put(field, Value::Str(s));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.put(field, Value::Str(value.to_owned()));
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.put(field, Value::U64(value));
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.put(field, Value::I64(value));
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.put(field, Value::Bool(value));
    }
}

/// A span's fields, kept in its extensions.
struct SpanFields(Fields);

/// One event, ready for the sinks.
#[derive(Debug, Clone)]
pub struct Line {
    /// Severity.
    pub level: super::Level,
    /// The lockspace it belongs to (the event's or an enclosing span's `ls` field, else
    /// the lockspace task being polled).
    pub ls: Option<String>,
    /// C's text names the lockspace (`log_group`), not a [`PLAIN_TARGET`] line.
    pub prefix: bool,
    /// C's plock-only line.
    pub plock_only: bool,
    /// A `log_dlock` line: into the plock ring as well as the debug ring.
    pub plock_too: bool,
    /// Where it comes from (`dlm_controld::daemon::lockspace`, ...).
    pub target: &'static str,
    /// The message and the event's fields.
    pub fields: Fields,
    /// The enclosing spans' fields, innermost first.
    pub spans: Vec<(&'static str, Fields)>,
}

impl Line {
    /// The JSON object written with `--log-format json`: `time` (monotonic seconds, as C's
    /// lines), `level`, `target`, `ls`, `msg`, then the event's fields, then span fields not
    /// already present.
    pub fn json(&self, now: u64) -> String {
        let mut m = serde_json::Map::new();
        m.insert("time".into(), now.into());
        m.insert("level".into(), self.level.name().into());
        m.insert("target".into(), self.target.into());
        if let Some(ls) = &self.ls {
            m.insert("ls".into(), ls.as_str().into());
        }
        m.insert("msg".into(), self.fields.message.as_str().into());
        let all = self
            .fields
            .rest
            .iter()
            .chain(self.spans.iter().flat_map(|(_, f)| f.rest.iter()));
        for (k, v) in all {
            m.entry(*k).or_insert_with(|| v.json());
        }
        serde_json::Value::Object(m).to_string()
    }
}

/// The layer; stateless, the sinks live in the logger.
#[derive(Debug, Default)]
pub struct CLayer;

fn level_of(l: TLevel) -> super::Level {
    match l {
        TLevel::ERROR => super::Level::Error,
        TLevel::WARN => super::Level::Warning,
        TLevel::INFO => super::Level::Info,
        _ => super::Level::Debug,
    }
}

fn ls_of(v: &Value) -> String {
    match v {
        Value::Str(s) => s.clone(),
        other => format!("{other:?}"),
    }
}

impl<S> tracing_subscriber::Layer<S> for CLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut f = Fields::default();
        attrs.record(&mut f);
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(SpanFields(f));
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let meta = event.metadata();
        if *meta.level() == TLevel::TRACE {
            return;
        }
        let mut fields = Fields::default();
        event.record(&mut fields);
        let mut spans = Vec::new();
        if let Some(scope) = ctx.event_scope(event) {
            for span in scope {
                if let Some(f) = span.extensions().get::<SpanFields>() {
                    spans.push((span.name(), f.0.clone()));
                }
            }
        }
        let ls = fields
            .get("ls")
            .or_else(|| spans.iter().find_map(|(_, f)| f.get("ls")))
            .map(ls_of)
            .or_else(super::task_ls::current);
        super::emit(&Line {
            level: level_of(*meta.level()),
            prefix: meta.target() != PLAIN_TARGET,
            ls,
            plock_only: meta.target() == PLOCK_TARGET,
            plock_too: meta.target() == PLOCK_DEBUG_TARGET,
            target: meta.target(),
            fields,
            spans,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing_subscriber::layer::SubscriberExt;

    /// A subscriber with the layer, for this thread only.
    fn with_layer(f: impl FnOnce()) {
        let sub = tracing_subscriber::registry().with(CLayer);
        tracing::subscriber::with_default(sub, f);
    }

    #[test]
    fn span_names_the_lockspace_and_fields_stay_typed() {
        let lines = super::super::capture(|| {
            with_layer(|| {
                let span = tracing::debug_span!("lockspace", ls = "layer1");
                let _g = span.enter();
                tracing::debug!(nodeid = 3u32, cg = 7u32, "add_change cg 7 joined nodeid 3");
                tracing::error!(ls = "other", errno = -5i64, "an error");
                tracing::debug!(target: PLOCK_TARGET, "plock only");
                tracing::debug!(target: PLAIN_TARGET, "kernel: online@ layer1");
            });
        });
        assert_eq!(lines.len(), 4, "{lines:?}");
        // a C log_debug line keeps the name as a field, not in the text
        assert!(lines[0].prefix && !lines[3].prefix);
        assert_eq!(lines[3].ls.as_deref(), Some("layer1"));
        let a = &lines[0];
        assert_eq!(a.ls.as_deref(), Some("layer1"));
        assert_eq!(a.fields.message, "add_change cg 7 joined nodeid 3");
        assert_eq!(a.fields.get("nodeid"), Some(&Value::U64(3)));
        assert!(!a.plock_only);
        // the event's own `ls` wins over the span's
        assert_eq!(lines[1].ls.as_deref(), Some("other"));
        assert_eq!(lines[1].level, super::super::Level::Error);
        assert!(lines[2].plock_only);

        let j: serde_json::Value = serde_json::from_str(&a.json(12)).expect("json");
        assert_eq!(j["time"], 12);
        assert_eq!(j["level"], "debug");
        assert_eq!(j["ls"], "layer1");
        assert_eq!(j["cg"], 7);
        assert_eq!(j["nodeid"], 3);
        assert_eq!(j["msg"], "add_change cg 7 joined nodeid 3");
        let e: serde_json::Value = serde_json::from_str(&lines[1].json(1)).expect("json");
        assert_eq!(e["errno"], -5);
        assert_eq!(e["ls"], "other");
    }
}
