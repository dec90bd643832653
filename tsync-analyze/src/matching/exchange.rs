//! Exchanges for inputs without TCP headers (text message files): a message i→j followed by the
//! next message j→i that j sent after receiving it. The check uses only j's clock, so every
//! exchange found is causal whatever the clock offsets. When several i→j messages precede the
//! reply, the last one is used, which keeps the round trip short (as the LTTV code does for ACKs).

use crate::model::{Exchange, Message, PairTable};

/// Finds exchanges in a stream of messages among `traces` traces.
#[derive(Clone, Debug, Default)]
pub struct ReplyPairing {
    /// Latest unanswered message per ordered pair (sender, receiver).
    latest: PairTable<Message>,
}

impl ReplyPairing {
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds a message; returns the exchange it completes, if any.
    pub fn push(&mut self, m: Message) -> Option<Exchange> {
        let (s, r) = (m.send_trace, m.recv_trace);
        let found = match self.latest.get(r, s) {
            Some(&req) if req.recv_ns <= m.send_ns => {
                self.latest.remove(r, s);
                Some(Exchange {
                    request: req,
                    reply: m,
                })
            }
            _ => None,
        };
        let slot = self.latest.get_or_insert_with(s, r, || m);
        if slot.send_ns <= m.send_ns {
            *slot = m;
        }
        found
    }
}
