//! Which joined spans give messages, and why each one is sound.
//!
//! The convex hull takes a message as a send time on one clock and a receive time on another,
//! with one promise: something left the sender at or after the send time and reached the
//! receiver at or before the receive time, so that the true latency is positive. A pair of spans
//! on two nodes gives such a point only where the instrumentation's semantics guarantee that
//! order. The rules (parent → child across nodes; links only where noted):
//!
//! * **Request: CLIENT start → SERVER start.** The client's span opens before the request is
//!   sent (the instrumentation wraps the call); the server's span opens once the request has
//!   arrived (it is made from the request's headers).
//! * **Response: SERVER start → CLIENT end.** The response leaves after the server span opened
//!   and the client span closes after the response arrived. Loose (the whole handling time) but
//!   certain, on two conditions checked here: the client span is not in ERROR (a timeout or a
//!   cancellation ends it without any response), and it has exactly one SERVER child (HTTP's
//!   conventions open a CLIENT span per attempt; a span over several attempts may end on a
//!   later attempt's response while an earlier attempt's server started late, after it).
//!   **Never SERVER end → CLIENT end:** the server's span closes after writing the response,
//!   and the client may read it first (measured: 1 in 2,448 real calls, by 310 µs).
//! * **Queue: PRODUCER start → CONSUMER end**, the consumer being the producer's child or
//!   linking to it. The producer's span opens before it hands the message over; the consumer's
//!   span ends after it had the message. Never CONSUMER start: a polling consumer's span can
//!   open before the message exists.
//! * **Message events** (OpenTelemetry's RPC conventions: a `message` event with `message.type`
//!   SENT or RECEIVED and `message.id`): a SENT event of one span → the RECEIVED event with the
//!   same id on the other span of the pair. The instrumentation records SENT as the message is
//!   handed to the transport and RECEIVED once it was read: tight where instrumentations
//!   record them (gRPC's). An id that is not unique on its side is ambiguous and gives nothing;
//!   events without ids pair only where each side has exactly one of its type without id.
//!
//! Same-node pairs give nothing (one clock: nothing to learn), and every other pairing of
//! kinds gives nothing either: no order between them is certain.

#[cfg(test)]
use super::read::SpanData;
use std::num::NonZeroI64;

use super::read::{Kind, MessageEvent};

/// What the rules read of a span: kept for every span of the window, so it is small.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Side {
    pub(crate) kind: Kind,
    /// The span's status is ERROR.
    pub(crate) error: bool,
    /// Start and end, ns on the node's CLOCK_REALTIME (never 0: OTLP's "unset"), in 8 bytes
    /// each.
    pub(crate) start: Option<NonZeroI64>,
    pub(crate) end: Option<NonZeroI64>,
    pub(crate) messages: Box<[MessageEvent]>,
}

impl Side {
    #[cfg(test)]
    pub(crate) fn of(span: &SpanData) -> Side {
        Side {
            kind: span.kind,
            error: span.error,
            start: span.start.and_then(NonZeroI64::new),
            end: span.end.and_then(NonZeroI64::new),
            messages: span.messages.clone().into_boxed_slice(),
        }
    }
}

/// How two spans are related.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Relation {
    /// The second is the first's child.
    Parent,
    /// The second links to the first.
    Link,
}

/// The rule a message came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Rule {
    Request,
    Response,
    Queue,
    MessageEvent,
}

/// One message of a pair: `send_ns` on one span's node, `recv_ns` on the other's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PairMessage {
    pub(crate) rule: Rule,
    /// True when the parent's (linked span's) node sends.
    pub(crate) parent_sends: bool,
    pub(crate) send_ns: i64,
    pub(crate) recv_ns: i64,
}

/// What a pair gave, besides its messages.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct PairNotes {
    /// A span of the pair has no kind (UNSPECIFIED): nothing can be said.
    pub(crate) without_kind: bool,
    /// The kinds fit no rule.
    pub(crate) no_rule: bool,
    /// A CLIENT parent in ERROR: no response point.
    pub(crate) error_client: bool,
    /// A CLIENT parent with several SERVER children: no response point.
    pub(crate) several_servers: bool,
    /// A time a rule needed is unset.
    pub(crate) unset_time: bool,
    /// Message events whose id is not unique on its side.
    pub(crate) ambiguous_events: u64,
}

/// The messages of a cross-node pair (`parent` the parent or linked span, `child` the child or
/// linking span); `servers` is how many SERVER children the parent has.
pub(crate) fn pair_messages(
    parent: &Side,
    child: &Side,
    relation: Relation,
    servers: u32,
    out: &mut Vec<PairMessage>,
) -> PairNotes {
    let mut notes = PairNotes::default();
    let mut push =
        |rule, parent_sends, send: Option<NonZeroI64>, recv: Option<NonZeroI64>| match (send, recv)
        {
            (Some(send), Some(recv)) => out.push(PairMessage {
                rule,
                parent_sends,
                send_ns: send.get(),
                recv_ns: recv.get(),
            }),
            _ => notes.unset_time = true,
        };
    match (relation, parent.kind, child.kind) {
        (Relation::Parent, Kind::Client, Kind::Server) => {
            push(Rule::Request, true, parent.start, child.start);
            if parent.error {
                notes.error_client = true;
            } else if servers != 1 {
                notes.several_servers = true;
            } else {
                push(Rule::Response, false, child.start, parent.end);
            }
        }
        (_, Kind::Producer, Kind::Consumer) => push(Rule::Queue, true, parent.start, child.end),
        (_, Kind::Unspecified, _) | (_, _, Kind::Unspecified) => notes.without_kind = true,
        _ => notes.no_rule = true,
    }
    if relation == Relation::Parent {
        let before = out.len();
        notes.ambiguous_events += events(&parent.messages, &child.messages, true, out);
        notes.ambiguous_events += events(&child.messages, &parent.messages, false, out);
        if out.len() > before {
            // Message events are messages whatever the kinds say.
            notes.no_rule = false;
            notes.without_kind = false;
        }
    }
    notes
}

/// SENT events of `from` → RECEIVED events of `to` with the same id; returns the ids (or
/// id-less events) left out because they are not unique on a side.
fn events(
    from: &[MessageEvent],
    to: &[MessageEvent],
    parent_sends: bool,
    out: &mut Vec<PairMessage>,
) -> u64 {
    let mut ambiguous = 0;
    for s in from.iter().filter(|e| e.sent) {
        let same = |e: &&MessageEvent| e.id == s.id;
        if from.iter().filter(|e| e.sent).filter(same).count() != 1 {
            ambiguous += 1;
            continue;
        }
        let mut receipts = to.iter().filter(|e| !e.sent).filter(same);
        match (receipts.next(), receipts.next()) {
            (Some(r), None) => out.push(PairMessage {
                rule: Rule::MessageEvent,
                parent_sends,
                send_ns: s.time,
                recv_ns: r.time,
            }),
            (Some(_), Some(_)) => ambiguous += 1,
            (None, _) => {}
        }
    }
    ambiguous
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(kind: Kind, start: i64, end: i64) -> SpanData {
        SpanData {
            key: (1, 1),
            parent: None,
            kind,
            start: Some(start),
            end: Some(end),
            error: false,
            messages: Vec::new(),
            links: Vec::new(),
        }
    }

    fn run(p: &SpanData, c: &SpanData, r: Relation, servers: u32) -> (Vec<PairMessage>, PairNotes) {
        let mut out = Vec::new();
        let notes = pair_messages(&Side::of(p), &Side::of(c), r, servers, &mut out);
        (out, notes)
    }

    #[test]
    fn client_and_server_give_the_request_and_the_response_never_the_server_end() {
        let client = span(Kind::Client, 100, 900);
        let server = span(Kind::Server, 300, 950);
        let (m, n) = run(&client, &server, Relation::Parent, 1);
        assert_eq!(n, PairNotes::default());
        assert_eq!(
            m,
            vec![
                PairMessage {
                    rule: Rule::Request,
                    parent_sends: true,
                    send_ns: 100,
                    recv_ns: 300
                },
                PairMessage {
                    rule: Rule::Response,
                    parent_sends: false,
                    send_ns: 300,
                    recv_ns: 900
                },
            ]
        );
        // The server's end (950, after the client's end) appears in no message.
        assert!(m.iter().all(|x| x.send_ns != 950 && x.recv_ns != 950));
        // A client in ERROR or over several attempts: the request only.
        let mut failed = client.clone();
        failed.error = true;
        let (m, n) = run(&failed, &server, Relation::Parent, 1);
        assert!(n.error_client && m.len() == 1 && m[0].rule == Rule::Request);
        let (m, n) = run(&client, &server, Relation::Parent, 2);
        assert!(n.several_servers && m.len() == 1);
    }

    #[test]
    fn queues_other_kinds_and_message_events() {
        let producer = span(Kind::Producer, 100, 150);
        let consumer = span(Kind::Consumer, 50, 400);
        for r in [Relation::Parent, Relation::Link] {
            let (m, _) = run(&producer, &consumer, r, 0);
            assert_eq!(
                (m[0].rule, m[0].send_ns, m[0].recv_ns),
                (Rule::Queue, 100, 400)
            );
        }
        let (m, n) = run(
            &span(Kind::Internal, 1, 2),
            &span(Kind::Server, 1, 2),
            Relation::Parent,
            1,
        );
        assert!(m.is_empty() && n.no_rule);
        let (m, n) = run(
            &span(Kind::Unspecified, 1, 2),
            &span(Kind::Server, 1, 2),
            Relation::Parent,
            1,
        );
        assert!(m.is_empty() && n.without_kind);
        // Client/server with RPC message events; id 2 is sent twice by the client: ambiguous.
        let ev = |sent, id, time| MessageEvent { sent, id, time };
        let mut c = span(Kind::Client, 100, 900);
        c.messages = vec![
            ev(true, Some(1), 110),
            ev(false, Some(1), 880),
            ev(true, Some(2), 120),
            ev(true, Some(2), 130),
        ];
        let mut s = span(Kind::Server, 300, 950);
        s.messages = vec![
            ev(false, Some(1), 310),
            ev(true, Some(1), 870),
            ev(false, Some(2), 320),
        ];
        let (m, n) = run(&c, &s, Relation::Parent, 1);
        let events: Vec<_> = m
            .iter()
            .filter(|x| x.rule == Rule::MessageEvent)
            .map(|x| (x.parent_sends, x.send_ns, x.recv_ns))
            .collect();
        assert_eq!(events, vec![(true, 110, 310), (false, 870, 880)]);
        assert_eq!(n.ambiguous_events, 2);
    }
}
