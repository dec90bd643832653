//! Exchanges for inputs without TCP headers (text message files): a message i→j followed by the
//! next message j→i that j sent after receiving it. The check uses only j's clock, so every
//! exchange found is causal whatever the clock offsets. When several i→j messages precede the
//! reply, the last one is used, which keeps the round trip short (as the LTTV code does for ACKs).

use crate::message::{Exchange, Message};

/// Finds exchanges in a stream of messages among `traces` traces.
#[derive(Clone, Debug)]
pub struct ReplyPairing {
    traces: usize,
    /// Latest unanswered message per ordered pair (sender·n + receiver).
    latest: Vec<Option<Message>>,
}

impl ReplyPairing {
    pub fn new(traces: usize) -> Self {
        ReplyPairing {
            traces,
            latest: vec![None; traces * traces],
        }
    }

    /// Feeds a message; returns the exchange it completes, if any.
    pub fn push(&mut self, m: Message) -> Option<Exchange> {
        let n = self.traces;
        let (s, r) = (m.send_trace as usize, m.recv_trace as usize);
        let back = &mut self.latest[r * n + s];
        let found = match *back {
            Some(req) if req.recv_ns <= m.send_ns => {
                *back = None;
                Some(Exchange {
                    request: req,
                    reply: m,
                })
            }
            _ => None,
        };
        let slot = &mut self.latest[s * n + r];
        if slot.is_none_or(|old| old.send_ns <= m.send_ns) {
            *slot = Some(m);
        }
        found
    }
}
