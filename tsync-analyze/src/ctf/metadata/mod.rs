//! CTF 1.8 metadata: the `metadata` file ([`file`]), its TSDL text ([`lexer`], [`parser`] into
//! the [`ast`]), and what it declares, names resolved ([`types`], [`TraceClass`]): the trace's
//! byte order and UUID, its environment, clocks, stream classes and event classes.
//!
//! No crate reads TSDL without the C library libbabeltrace2 (the analyzer must build anywhere,
//! statically too), so this is a small hand-written parser of what LTTng writes.

pub mod ast;
pub mod clock;
pub mod file;
pub mod lexer;
pub mod parser;
pub mod types;

use std::collections::HashMap;
use std::sync::Arc;

use ast::{Attr, BlockKind, Decl, Value};
pub use clock::{ClockClass, clock_classes};
pub use file::{METADATA_MAGIC, Metadata, is_metadata};
use types::{ByteOrder, Type, TypeScope};

/// Most event classes a trace may declare (LTTng's kernel tracer declares about 1 400).
pub const MAX_EVENT_CLASSES: usize = 1 << 20;
/// Most stream classes a trace may declare.
pub const MAX_STREAM_CLASSES: usize = 1 << 12;

/// Metadata that cannot be read, with where (line) when the TSDL text is at fault.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct MetadataError(String);

impl MetadataError {
    /// An error without position.
    pub fn new(what: impl Into<String>) -> Self {
        MetadataError(what.into())
    }

    /// An error at byte `offset` of the TSDL `text`: says the line and shows it.
    pub fn at(text: &str, offset: usize, what: impl Into<String>) -> Self {
        let offset = offset.min(text.len());
        let line = text.as_bytes()[..offset]
            .iter()
            .filter(|&&b| b == b'\n')
            .count()
            + 1;
        let begin = text[..offset].rfind('\n').map_or(0, |p| p + 1);
        let end = text[offset..].find('\n').map_or(text.len(), |p| offset + p);
        let mut shown: String = text[begin..end].trim().chars().take(100).collect();
        if shown.is_empty() {
            shown = "(end of text)".into();
        }
        MetadataError(format!("metadata line {line}: {}: `{shown}`", what.into()))
    }

    /// The same error, naming the file it is in.
    pub fn in_file(self, path: &std::path::Path) -> Self {
        MetadataError(format!("{}: {}", path.display(), self.0))
    }
}

/// A value of the `env` block.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(untagged)]
pub enum EnvValue {
    /// An integer.
    Int(i128),
    /// A string.
    Str(String),
}

/// A clock class: `value` cycles at `freq` Hz after `offset_s` s + `offset` cycles from the
/// epoch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Clock {
    /// Its name (`monotonic` for LTTng).
    pub name: String,
    /// Frequency, Hz.
    pub freq: u64,
    /// Offset from the epoch, seconds.
    pub offset_s: i64,
    /// Offset from the epoch, cycles.
    pub offset: i64,
    /// `uuid`, as written.
    pub uuid: Option<String>,
    /// `description`.
    pub description: Option<String>,
}

impl Clock {
    /// Nanoseconds of `cycles` of this clock (exact up to the truncation of the last ns).
    #[inline]
    pub fn ns(&self, cycles: u64) -> u64 {
        if self.freq == 1_000_000_000 {
            cycles
        } else {
            (u128::from(cycles) * 1_000_000_000 / u128::from(self.freq)).min(u64::MAX as u128)
                as u64
        }
    }

    /// The clock's offset from the epoch, ns: what a reader adds to [`ns`](Self::ns) to get
    /// realtime.
    pub fn offset_ns(&self) -> i64 {
        let ns = i128::from(self.offset_s) * 1_000_000_000
            + i128::from(self.offset) * 1_000_000_000 / i128::from(self.freq);
        ns.clamp(i64::MIN as i128, i64::MAX as i128) as i64
    }
}

/// A stream class: the types around its events.
#[derive(Clone, Debug, Default)]
pub struct StreamClass {
    /// `id` (0 when the trace declares one stream without id).
    pub id: u64,
    /// `packet.context`.
    pub packet_context: Option<Arc<Type>>,
    /// `event.header`.
    pub event_header: Option<Arc<Type>>,
    /// `event.context` (the stream's, before each event's own).
    pub event_context: Option<Arc<Type>>,
}

/// An event class.
#[derive(Clone, Debug)]
pub struct EventClass {
    /// `name`.
    pub name: String,
    /// `id` within its stream class.
    pub id: u64,
    /// `stream_id`.
    pub stream_id: u64,
    /// `context`.
    pub context: Option<Arc<Type>>,
    /// `fields` (the payload).
    pub fields: Option<Arc<Type>>,
}

/// What a trace's metadata declares.
#[derive(Clone, Debug)]
pub struct TraceClass {
    /// The trace's byte order (that of its `native` types).
    pub byte_order: ByteOrder,
    /// `uuid`.
    pub uuid: Option<[u8; 16]>,
    /// `packet.header`.
    pub packet_header: Option<Arc<Type>>,
    /// The `env` block, in order.
    pub env: Vec<(String, EnvValue)>,
    /// The clocks.
    pub clocks: Vec<Clock>,
    /// The stream classes.
    pub streams: Vec<StreamClass>,
    /// The event classes.
    pub events: Vec<EventClass>,
}

impl TraceClass {
    /// Reads what `text` declares. `hint_little_endian`: the byte order of the metadata packets,
    /// used when the `trace` block gives none.
    pub fn parse(text: &str, hint_little_endian: bool) -> Result<TraceClass, MetadataError> {
        let decls = parser::parse(text)?;
        let mut scope = TypeScope::default();
        let mut trace = TraceClass {
            byte_order: ByteOrder::Native,
            uuid: None,
            packet_header: None,
            env: Vec::new(),
            clocks: Vec::new(),
            streams: Vec::new(),
            events: Vec::new(),
        };
        let mut seen: HashMap<(u64, u64), usize> = HashMap::new();
        for d in &decls {
            let ctx = |what: String| MetadataError::new(format!("metadata: {what}"));
            match d {
                Decl::Alias { ty, dims, name } => {
                    let t = scope
                        .resolve(ty)
                        .map_err(|e| ctx(format!("typealias {name}: {e}")))?;
                    let t = scope
                        .with_dims(t, dims)
                        .map_err(|e| ctx(format!("typedef {name}: {e}")))?;
                    scope.declare(name.clone(), t);
                }
                Decl::Type(t) => {
                    scope.resolve(t).map_err(ctx)?;
                }
                Decl::Block { kind, attrs, .. } => match kind {
                    BlockKind::Trace => trace.trace_block(attrs, &mut scope).map_err(ctx)?,
                    BlockKind::Env => {
                        for a in attrs {
                            let v = match &a.value {
                                Value::Int(i) => EnvValue::Int(*i),
                                Value::Str(s) | Value::Path(s) => EnvValue::Str(s.clone()),
                                Value::Type(_) => continue,
                            };
                            trace.env.push((a.key.clone(), v));
                        }
                    }
                    BlockKind::Clock => trace.clocks.push(clock_block(attrs).map_err(ctx)?),
                    BlockKind::Stream => {
                        if trace.streams.len() >= MAX_STREAM_CLASSES {
                            return Err(ctx(format!("more than {MAX_STREAM_CLASSES} streams")));
                        }
                        let s = stream_block(attrs, &mut scope).map_err(ctx)?;
                        if trace.streams.iter().any(|o| o.id == s.id) {
                            return Err(ctx(format!("stream {} declared twice", s.id)));
                        }
                        trace.streams.push(s);
                    }
                    BlockKind::Event => {
                        if trace.events.len() >= MAX_EVENT_CLASSES {
                            return Err(ctx(format!("more than {MAX_EVENT_CLASSES} events")));
                        }
                        let e = event_block(attrs, &mut scope).map_err(ctx)?;
                        if seen
                            .insert((e.stream_id, e.id), trace.events.len())
                            .is_some()
                        {
                            return Err(ctx(format!(
                                "event id {} of stream {} declared twice (`{}`)",
                                e.id, e.stream_id, e.name
                            )));
                        }
                        trace.events.push(e);
                    }
                    BlockKind::Other => {}
                },
            }
        }
        if trace.byte_order == ByteOrder::Native {
            trace.byte_order = if hint_little_endian {
                ByteOrder::Little
            } else {
                ByteOrder::Big
            };
        }
        if trace.streams.is_empty() {
            trace.streams.push(StreamClass::default());
        }
        Ok(trace)
    }

    fn trace_block(&mut self, attrs: &[Attr], scope: &mut TypeScope) -> Result<(), String> {
        for a in attrs {
            match (a.key.as_str(), &a.value) {
                ("byte_order", Value::Path(p)) => {
                    self.byte_order = match p.as_str() {
                        "le" | "little" => ByteOrder::Little,
                        "be" | "big" | "network" => ByteOrder::Big,
                        _ => return Err(format!("trace byte_order `{p}`")),
                    }
                }
                ("uuid", Value::Str(s)) => self.uuid = Some(parse_uuid(s)?),
                ("packet.header", Value::Type(t)) => {
                    self.packet_header = Some(scope.resolve(t)?);
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// The value of `env.key` as text (strings as they are, integers in decimal).
    pub fn env(&self, key: &str) -> Option<String> {
        self.env
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| match v {
                EnvValue::Int(i) => i.to_string(),
                EnvValue::Str(s) => s.clone(),
            })
    }
}

/// A UUID written `"xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"`.
pub fn parse_uuid(s: &str) -> Result<[u8; 16], String> {
    let hex: Vec<u8> = s.bytes().filter(|&b| b != b'-').collect();
    if hex.len() != 32 {
        return Err(format!("uuid `{s}` is not 16 hexadecimal bytes"));
    }
    let mut out = [0u8; 16];
    for (i, pair) in hex.chunks(2).enumerate() {
        let t = std::str::from_utf8(pair).map_err(|_| format!("uuid `{s}`"))?;
        out[i] = u8::from_str_radix(t, 16).map_err(|_| format!("uuid `{s}`"))?;
    }
    Ok(out)
}

/// A UUID's text form, `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`.
pub fn uuid_text(u: &[u8; 16]) -> String {
    let h: String = u.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..]
    )
}

fn int_value(a: &Attr) -> Result<i128, String> {
    match a.value {
        Value::Int(v) => Ok(v),
        _ => Err(format!("`{}` must be an integer", a.key)),
    }
}

fn text_value(a: &Attr) -> Option<String> {
    match &a.value {
        Value::Str(s) | Value::Path(s) => Some(s.clone()),
        _ => None,
    }
}

fn clock_block(attrs: &[Attr]) -> Result<Clock, String> {
    let mut c = Clock {
        name: String::new(),
        freq: 1_000_000_000,
        offset_s: 0,
        offset: 0,
        uuid: None,
        description: None,
    };
    for a in attrs {
        match a.key.as_str() {
            "name" => c.name = text_value(a).unwrap_or_default(),
            "freq" => {
                c.freq = u64::try_from(int_value(a)?)
                    .ok()
                    .filter(|&f| f > 0)
                    .ok_or("clock `freq` must be positive")?
            }
            "offset_s" => {
                c.offset_s = i64::try_from(int_value(a)?).map_err(|_| "clock `offset_s`")?
            }
            "offset" => c.offset = i64::try_from(int_value(a)?).map_err(|_| "clock `offset`")?,
            "uuid" => c.uuid = text_value(a),
            "description" => c.description = text_value(a),
            _ => {}
        }
    }
    Ok(c)
}

fn type_value(a: &Attr, scope: &mut TypeScope) -> Result<Option<Arc<Type>>, String> {
    match &a.value {
        Value::Type(t) => scope.resolve(t).map(Some),
        _ => Err(format!("`{}` must be a type (`:=`)", a.key)),
    }
}

fn stream_block(attrs: &[Attr], scope: &mut TypeScope) -> Result<StreamClass, String> {
    let mut s = StreamClass::default();
    for a in attrs {
        match a.key.as_str() {
            "id" => s.id = u64::try_from(int_value(a)?).map_err(|_| "stream `id`")?,
            "packet.context" => s.packet_context = type_value(a, scope)?,
            "event.header" => s.event_header = type_value(a, scope)?,
            "event.context" => s.event_context = type_value(a, scope)?,
            _ => {}
        }
    }
    Ok(s)
}

fn event_block(attrs: &[Attr], scope: &mut TypeScope) -> Result<EventClass, String> {
    let mut e = EventClass {
        name: String::new(),
        id: 0,
        stream_id: 0,
        context: None,
        fields: None,
    };
    for a in attrs {
        match a.key.as_str() {
            "name" => e.name = text_value(a).unwrap_or_default(),
            "id" => e.id = u64::try_from(int_value(a)?).map_err(|_| "event `id`")?,
            "stream_id" => {
                e.stream_id = u64::try_from(int_value(a)?).map_err(|_| "event `stream_id`")?
            }
            "context" => e.context = type_value(a, scope)?,
            "fields" => e.fields = type_value(a, scope)?,
            _ => {}
        }
    }
    Ok(e)
}
