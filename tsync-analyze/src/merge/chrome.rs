//! Chrome trace-event JSON (`{"traceEvents": [...], ...}` or a bare array): events merged by
//! `ts` (µs), the interval from `args.<field>_lo` and `args.<field>_hi` (`apply --interval`), the
//! verdict written as `args.tsync_order`. Metadata events (`"ph": "M"`, no time) keep their place
//! in their file. The result is one document `{"traceEvents": [...]}` followed by the other
//! members of the inputs (the first file's value where several have one).
//!
//! A Chrome trace is one JSON document, and serde parses it by pushing events to a visitor; the
//! merge pulls. So each file is parsed on its own thread, which hands its events over a small
//! bounded channel: one event at a time in memory per file, whatever the file's size.

use std::cell::{Cell, RefCell};
use std::fmt;
use std::io::{BufRead, Write};
use std::rc::Rc;
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

use super::{MergeError, Next, ORDER_FIELD, Order, Sink, Source};
use crate::apply::chrome::{LineCounter, us_to_ns};

/// What a parsing thread hands over.
enum Msg {
    /// An event and the line the parser was at.
    Event(Map<String, Value>, u64),
    /// A member of the document other than `traceEvents`.
    Member(String, Value),
    /// The file is not a Chrome trace (the message names file:line), or could not be read.
    Failed(MergeError),
}

/// The members besides `traceEvents` that every file's source adds to.
pub type Members = Rc<RefCell<Vec<(String, Value)>>>;

/// One file's events.
pub struct ChromeSource {
    rx: Receiver<Msg>,
    name: String,
    field: String,
    bounds: (String, String),
    members: Members,
    events: u64,
}

/// Pushes events into the channel; stops when the receiver is gone.
struct Push<'a> {
    tx: &'a SyncSender<Msg>,
    lines: &'a Rc<Cell<u64>>,
}

impl<'de> Visitor<'de> for Push<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a Chrome trace: {\"traceEvents\": [...]} or an array of events")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        use serde::de::Error;
        while let Some(v) = seq.next_element::<Value>()? {
            let Value::Object(event) = v else {
                return Err(A::Error::custom("an event is not a JSON object"));
            };
            if self
                .tx
                .send(Msg::Event(event, self.lines.get() + 1))
                .is_err()
            {
                return Err(A::Error::custom("the merge stopped"));
            }
        }
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        use serde::de::Error;
        let mut had_events = false;
        while let Some(key) = map.next_key::<String>()? {
            if key == "traceEvents" {
                had_events = true;
                map.next_value_seed(Push {
                    tx: self.tx,
                    lines: self.lines,
                })?;
            } else {
                let v: Value = map.next_value()?;
                if self.tx.send(Msg::Member(key, v)).is_err() {
                    return Err(A::Error::custom("the merge stopped"));
                }
            }
        }
        if !had_events {
            return Err(A::Error::custom("the object has no `traceEvents` array"));
        }
        Ok(())
    }
}

impl<'de> DeserializeSeed<'de> for Push<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

/// Parses one document into the channel (on its own thread).
fn parse(input: Box<dyn BufRead + Send>, name: &str, tx: SyncSender<Msg>) {
    let lines = Rc::new(Cell::new(0));
    let reader = LineCounter {
        inner: input,
        lines: lines.clone(),
    };
    let mut de = serde_json::Deserializer::from_reader(reader);
    let parsed = de
        .deserialize_any(Push {
            tx: &tx,
            lines: &lines,
        })
        .and_then(|()| de.end());
    if let Err(e) = parsed {
        let failure = if e.is_io() {
            MergeError::io(format!("cannot read {name}"), e.into())
        } else {
            MergeError::Input(format!(
                "{name}:{}: not a Chrome trace ({{\"traceEvents\": [...]}} or an array of \
                 events): {e}",
                e.line()
            ))
        };
        // The receiver may be gone already (the merge failed elsewhere): nothing to tell.
        let _ = tx.send(Msg::Failed(failure));
    }
}

impl ChromeSource {
    /// Starts parsing `input` (named `name` in errors) on its own thread; merges by `field`
    /// (µs); the document's other members go to `members`.
    pub fn new(
        input: Box<dyn BufRead + Send>,
        name: &str,
        field: &str,
        members: Members,
    ) -> Result<Self, MergeError> {
        let (tx, rx) = sync_channel(256);
        let shown = name.to_string();
        std::thread::Builder::new()
            .name(format!("merge {name}"))
            .spawn(move || parse(input, &shown, tx))
            .map_err(|e| MergeError::io("cannot start a parsing thread", e))?;
        Ok(ChromeSource {
            rx,
            name: name.to_string(),
            field: field.to_string(),
            bounds: crate::apply::interval_names(field),
            members,
            events: 0,
        })
    }

    /// A bound in µs (number, or null for none) as ns, rounded outwards.
    fn bound(&self, args: Option<&Value>, key: &str, upper: bool) -> Result<Option<i64>, String> {
        let Some(v) = args.and_then(|a| a.get(key)) else {
            return Ok(None);
        };
        if v.is_null() {
            return Ok(None);
        }
        let Some(n) = v.as_number() else {
            return Err(format!("`args.{key}` is {v}, not a number of microseconds"));
        };
        if let Some(i) = n.as_i64() {
            return Ok(i.checked_mul(1000));
        }
        let f = n.as_f64().unwrap_or(f64::NAN) * 1000.0;
        let f = if upper { f.ceil() } else { f.floor() };
        Ok((f.is_finite() && f.abs() < 9.2e18).then_some(f as i64))
    }
}

impl Source for ChromeSource {
    type Item = Map<String, Value>;

    fn next(&mut self) -> Result<Next<Map<String, Value>>, MergeError> {
        loop {
            let (event, line) = match self.rx.recv() {
                Err(_) => return Ok(Next::End),
                Ok(Msg::Failed(e)) => return Err(e),
                Ok(Msg::Member(k, v)) => {
                    self.members.borrow_mut().push((k, v));
                    continue;
                }
                Ok(Msg::Event(e, line)) => (e, line),
            };
            self.events += 1;
            let fail = |what: String| {
                MergeError::Input(format!(
                    "{}:{line}: event {}: {what}",
                    self.name, self.events
                ))
            };
            let Some(ts) = event.get(&self.field) else {
                if event.get("ph").and_then(Value::as_str) == Some("M") {
                    return Ok(Next::Untimed(event));
                }
                return Err(fail(format!(
                    "no `{}` (only metadata events, \"ph\": \"M\", may lack it)",
                    self.field
                )));
            };
            let t = us_to_ns(ts)
                .ok_or_else(|| fail(format!("`{}` is {ts}, not a number of µs", self.field)))?;
            let args = event.get("args");
            if args.is_some_and(|a| !a.is_object()) {
                return Err(fail("`args` is not an object".into()));
            }
            if args.is_some_and(|a| a.get(ORDER_FIELD).is_some()) {
                return Err(fail(format!(
                    "`args.{ORDER_FIELD}` is there already: was the file merged already?"
                )));
            }
            let lo = self.bound(args, &self.bounds.0, false).map_err(fail)?;
            let hi = self.bound(args, &self.bounds.1, true).map_err(fail)?;
            return Ok(Next::Timed {
                t,
                interval: lo.zip(hi),
                line,
                item: event,
            });
        }
    }

    fn name(&self) -> &str {
        &self.name
    }
}

/// Writes `{"traceEvents":[` … `]` and, at the end, the documents' other members.
pub struct ChromeSink<W: Write> {
    out: W,
    first: bool,
}

impl<W: Write> ChromeSink<W> {
    /// Starts the document on `out`.
    pub fn new(mut out: W) -> Result<Self, MergeError> {
        out.write_all(b"{\"traceEvents\":[")
            .map_err(|e| MergeError::io("cannot write the output", e))?;
        Ok(ChromeSink { out, first: true })
    }

    fn event(&mut self, event: &Map<String, Value>) -> Result<(), MergeError> {
        let sep: &[u8] = if self.first { b"\n" } else { b",\n" };
        self.first = false;
        self.out
            .write_all(sep)
            .map_err(|e| MergeError::io("cannot write the output", e))?;
        serde_json::to_writer(&mut self.out, event)
            .map_err(|e| MergeError::io("cannot write the output", e.into()))
    }

    /// Closes the array, writes `members` (the first of each key), closes the document.
    pub fn finish(mut self, members: &[(String, Value)]) -> Result<W, MergeError> {
        let io = |e| MergeError::io("cannot write the output", e);
        self.out.write_all(b"]").map_err(io)?;
        let mut seen = std::collections::BTreeSet::new();
        for (k, v) in members {
            if seen.insert(k.as_str()) {
                self.out.write_all(b",\n").map_err(io)?;
                serde_json::to_writer(&mut self.out, k).map_err(|e| io(e.into()))?;
                self.out.write_all(b":").map_err(io)?;
                serde_json::to_writer(&mut self.out, v).map_err(|e| io(e.into()))?;
            }
        }
        self.out.write_all(b"}\n").map_err(io)?;
        self.out.flush().map_err(io)?;
        Ok(self.out)
    }
}

impl<W: Write> Sink<Map<String, Value>> for ChromeSink<W> {
    fn record(&mut self, event: &mut Map<String, Value>, order: Order) -> Result<(), MergeError> {
        if let Value::Object(args) = event
            .entry("args")
            .or_insert_with(|| Value::Object(Map::new()))
        {
            args.insert(ORDER_FIELD.into(), Value::from(order.as_str()));
        }
        self.event(event)
    }

    fn untimed(&mut self, event: &mut Map<String, Value>) -> Result<(), MergeError> {
        self.event(event)
    }
}
