//! A trace's metadata compiled for reading its streams: one [`Node`] per packet header, packet
//! context, event header and context, and payload, with the roles the reader needs, and the
//! table from event ids to event classes.

use std::collections::HashMap;

use super::header::FastHeader;
use super::layout::{Compiler, Node, Role, Scope};
use super::metadata::types::{IntType, Type};
use super::metadata::{Clock, MetadataError, TraceClass};
use super::network::{self, NetEvent};

/// Event ids below this are looked up in a vector, others in a map.
const DENSE_IDS: u64 = 1 << 16;

/// One stream class, compiled.
#[derive(Debug)]
pub struct StreamProgram {
    /// `stream.packet.context`.
    pub packet_context: Option<Node>,
    /// `stream.event.header`.
    pub event_header: Option<Node>,
    /// The same, decoded in straight-line code when it has LTTng's shape.
    pub fast_header: Option<FastHeader>,
    /// `stream.event.context`.
    pub event_context: Option<Node>,
    dense: Vec<u32>,
    sparse: HashMap<u64, u32>,
    /// The event class when the stream has only one (events without an `id`).
    only: Option<u32>,
}

impl StreamProgram {
    /// Index (in [`TraceClass::events`]) of the event class `id`, or of the stream's only class
    /// when its events carry no id.
    #[inline]
    pub fn event(&self, id: Option<u64>) -> Option<u32> {
        match id {
            Some(id) if id < self.dense.len() as u64 => {
                Some(self.dense[id as usize]).filter(|&e| e != u32::MAX)
            }
            Some(id) => self.sparse.get(&id).copied(),
            None => self.only,
        }
    }
}

/// One event class, compiled.
#[derive(Debug)]
pub struct EventProgram {
    /// `context`.
    pub context: Option<Node>,
    /// `fields`.
    pub fields: Option<Node>,
    /// What kind of network event it is, if one.
    pub net: Option<NetEvent>,
}

/// A trace's metadata, ready to decode streams.
#[derive(Debug)]
pub struct Program {
    /// `trace.packet.header`.
    pub packet_header: Option<Node>,
    /// Stream classes, and where each id is.
    pub streams: Vec<StreamProgram>,
    stream_ids: HashMap<u64, usize>,
    /// Event classes, indexed as in [`TraceClass::events`].
    pub events: Vec<EventProgram>,
    /// Slots the decoder needs.
    pub slots: usize,
    /// The clock the timestamps count (None: a trace without clock, its counts taken as ns).
    pub clock: Option<Clock>,
}

fn packet_header_role(name: &str, _: &IntType) -> Role {
    match name {
        "magic" => Role::Magic,
        "stream_id" => Role::StreamId,
        "uuid" => Role::TraceUuid,
        _ => Role::None,
    }
}

fn packet_context_role(name: &str, _: &IntType) -> Role {
    match name {
        "timestamp_begin" => Role::TsBegin,
        "timestamp_end" => Role::TsEnd,
        "content_size" => Role::ContentSize,
        "packet_size" => Role::PacketSize,
        "events_discarded" => Role::Discarded,
        "cpu_id" => Role::CpuId,
        "packet_seq_num" => Role::SeqNum,
        _ => Role::None,
    }
}

fn event_header_role(name: &str, t: &IntType) -> Role {
    if t.clock.is_some() {
        Role::Clock
    } else if name == "id" {
        Role::EventId
    } else {
        Role::None
    }
}

fn context_role(_: &str, t: &IntType) -> Role {
    if t.clock.is_some() {
        Role::Clock
    } else {
        Role::None
    }
}

fn no_role(_: &str, _: &IntType) -> Role {
    Role::None
}

/// The clock a type's integers map to, if any.
fn mapped_clock(t: &Type) -> Option<String> {
    match t {
        Type::Int(i) => i.clock.clone(),
        Type::Struct { fields, .. } => fields.iter().find_map(|(_, f)| mapped_clock(f)),
        Type::Variant { options, .. } => options.iter().find_map(|(_, f)| mapped_clock(f)),
        _ => None,
    }
}

impl Program {
    /// Compiles `trace`.
    pub fn compile(trace: &TraceClass) -> Result<Program, MetadataError> {
        let err = |what: String| MetadataError::new(format!("metadata: {what}"));
        let mut c = Compiler::new(trace.byte_order);
        let mut compile = |t: &Option<std::sync::Arc<Type>>,
                           scope: Scope,
                           roles: &dyn Fn(&str, &IntType) -> Role,
                           what: &str|
         -> Result<Option<Node>, MetadataError> {
            t.as_deref()
                .map(|t| c.compile(t, scope, roles))
                .transpose()
                .map_err(|e| err(format!("{what}: {e}")))
        };
        let packet_header = compile(
            &trace.packet_header,
            Scope::PacketHeader,
            &packet_header_role,
            "trace packet.header",
        )?;
        let mut streams = Vec::with_capacity(trace.streams.len());
        let mut stream_ids = HashMap::new();
        let mut stream_nodes = Vec::new();
        for s in &trace.streams {
            let what = format!("stream {}", s.id);
            let pc = compile(
                &s.packet_context,
                Scope::PacketContext,
                &packet_context_role,
                &what,
            )?;
            let eh = compile(
                &s.event_header,
                Scope::EventHeader,
                &event_header_role,
                &what,
            )?;
            let ec = compile(&s.event_context, Scope::EventContext, &context_role, &what)?;
            stream_ids.insert(s.id, streams.len());
            stream_nodes.push((pc, eh, ec));
            streams.push(StreamProgram {
                packet_context: None,
                event_header: None,
                fast_header: None,
                event_context: None,
                dense: Vec::new(),
                sparse: HashMap::new(),
                only: None,
            });
        }
        let mut events = Vec::with_capacity(trace.events.len());
        let mut per_stream = vec![0usize; streams.len()];
        for (k, e) in trace.events.iter().enumerate() {
            let &si = stream_ids.get(&e.stream_id).ok_or_else(|| {
                err(format!(
                    "event `{}` names stream {}, which is not declared",
                    e.name, e.stream_id
                ))
            })?;
            let net = network::classify(e);
            let what = format!("event `{}`", e.name);
            // Payloads are compiled in the context of their stream's header: absolute paths
            // there resolve (no LTTng payload uses one).
            let context = compile(&e.context, Scope::EventContext, &context_role, &what)?;
            let payload_roles: &dyn Fn(&str, &IntType) -> Role = match net {
                Some(n) if n.usable => &network::role,
                _ => &no_role,
            };
            let fields = compile(&e.fields, Scope::Payload, payload_roles, &what)?;
            let s = &mut streams[si];
            if e.id < DENSE_IDS {
                if s.dense.len() <= e.id as usize {
                    s.dense.resize(e.id as usize + 1, u32::MAX);
                }
                s.dense[e.id as usize] = k as u32;
            } else {
                s.sparse.insert(e.id, k as u32);
            }
            per_stream[si] += 1;
            s.only = (per_stream[si] == 1).then_some(k as u32);
            events.push(EventProgram {
                context,
                fields,
                net,
            });
        }
        for (s, (pc, eh, ec)) in streams.iter_mut().zip(stream_nodes) {
            s.packet_context = pc.map(|n| c.finish(n));
            s.event_header = eh.map(|n| c.finish(n));
            s.fast_header = s.event_header.as_ref().and_then(FastHeader::of);
            s.event_context = ec.map(|n| c.finish(n));
        }
        for e in &mut events {
            e.context = e.context.take().map(|n| c.finish(n));
            e.fields = e.fields.take().map(|n| c.finish(n));
        }
        let clock_name = trace
            .streams
            .iter()
            .find_map(|s| s.event_header.as_deref().and_then(mapped_clock));
        let clock = clock_name
            .and_then(|n| trace.clocks.iter().find(|c| c.name == n))
            .or(trace.clocks.first())
            .cloned();
        Ok(Program {
            packet_header: packet_header.map(|n| c.finish(n)),
            streams,
            stream_ids,
            events,
            slots: c.slots(),
            clock,
        })
    }

    /// The stream class of a packet's `stream_id` (the only one when the header has none).
    pub fn stream(&self, id: Option<u64>) -> Option<usize> {
        match id {
            Some(id) => self.stream_ids.get(&id).copied(),
            None => (self.streams.len() == 1).then_some(0),
        }
    }
}
