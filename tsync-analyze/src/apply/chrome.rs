//! Chrome trace-event JSON (what Perfetto and chrome://tracing load): both the object form
//! `{"traceEvents": [...], ...}` and a bare array of events. Each event's time field (`ts`,
//! microseconds, integer or fractional) is mapped, the original kept as `<field>_local` beside
//! it, and a complete event's `dur` follows its end (`dur' = map(ts + dur) − map(ts)`); metadata
//! events (`"ph": "M"`) carry no time and pass through. With `--interval`, the event's `args`
//! gain `<field>_lo` and `<field>_hi`: the guaranteed interval of the time, in µs rounded
//! outwards to whole µs (so it still holds the truth), `null` where there is none. The file is
//! one JSON document, so it is
//! streamed event by event through serde (one event in memory, whatever the file size); the
//! other members of the object form are copied as they are.

use std::cell::Cell;
use std::fmt;
use std::io::{BufRead, Read, Write};
use std::rc::Rc;

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

use super::{ApplyError, ApplySummary, NodeMapper};

/// Counts the lines read through it (serde_json reads its input byte by byte, so the count is
/// where the parser is, to within the byte it looks ahead).
pub(crate) struct LineCounter<R> {
    pub(crate) inner: R,
    pub(crate) lines: Rc<Cell<u64>>,
}

impl<R: Read> Read for LineCounter<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        let newlines = buf[..n].iter().filter(|&&b| b == b'\n').count() as u64;
        self.lines.set(self.lines.get() + newlines);
        Ok(n)
    }
}

/// Microseconds (a JSON number) as nanoseconds.
pub(crate) fn us_to_ns(v: &Value) -> Option<i64> {
    let n = v.as_number()?;
    if let Some(i) = n.as_i64() {
        return i.checked_mul(1000);
    }
    let f = n.as_f64()? * 1000.0;
    (f.is_finite() && f.abs() < 9.2e18).then(|| f.round() as i64)
}

/// What the streaming visitors share.
struct State<'m, 'a, W: Write> {
    out: W,
    field: String,
    local: String,
    /// With `--interval`: the names of the bounds in `args`.
    interval: Option<(String, String)>,
    mapper: &'m mut NodeMapper<'a>,
    summary: ApplySummary,
    /// Why the run stopped, when it was not a JSON syntax error.
    failure: Option<ApplyError>,
    lines: Rc<Cell<u64>>,
    name: String,
    events: u64,
}

impl<W: Write> State<'_, '_, W> {
    fn write(&mut self, bytes: &[u8]) -> Result<(), String> {
        self.out.write_all(bytes).map_err(|e| {
            self.failure = Some(ApplyError::io("cannot write the output", e));
            "write failed".to_string()
        })
    }

    fn write_value(&mut self, v: &Value) -> Result<(), String> {
        serde_json::to_writer(&mut self.out, v).map_err(|e| {
            self.failure = Some(ApplyError::io("cannot write the output", e.into()));
            "write failed".to_string()
        })
    }

    fn fail(&mut self, what: String) -> String {
        let line = self.lines.get() + 1;
        self.failure = Some(ApplyError::Events(format!(
            "{}:{line}: event {}: {what}",
            self.name, self.events
        )));
        what
    }

    fn us(ns: i64) -> Value {
        if ns % 1000 == 0 {
            Value::Number(Number::from(ns / 1000))
        } else {
            Number::from_f64(ns as f64 / 1000.0).map_or(Value::Null, Value::Number)
        }
    }

    /// Writes the interval (µs, rounded outwards) into the event's `args`.
    fn bounds(
        &mut self,
        event: &mut Map<String, Value>,
        (lo, hi): (String, String),
        interval: Option<(i64, i64)>,
    ) -> Result<(), String> {
        self.summary.without_interval += u64::from(interval.is_none());
        let args = event
            .entry("args")
            .or_insert_with(|| Value::Object(Map::new()));
        let Value::Object(args) = args else {
            return Err(self.fail("`args` is not an object".into()));
        };
        if let Some(there) = [&lo, &hi].into_iter().find(|k| args.contains_key(*k)) {
            let there = there.clone();
            return Err(self.fail(format!(
                "`args` already has `{there}`: was the file applied already? (--interval \
                 writes the guaranteed interval under that name)"
            )));
        }
        let (l, h) = match interval {
            Some((l, h)) => (
                Value::from(l.div_euclid(1000)),
                Value::from(h.div_euclid(1000) + i64::from(h.rem_euclid(1000) != 0)),
            ),
            None => (Value::Null, Value::Null),
        };
        args.insert(lo, l);
        args.insert(hi, h);
        Ok(())
    }

    /// Maps one event and writes it.
    fn event(&mut self, mut event: Map<String, Value>) -> Result<(), String> {
        self.events += 1;
        let metadata = event.get("ph").and_then(Value::as_str) == Some("M");
        let Some(ts) = event.get(&self.field) else {
            if metadata {
                self.summary.passed_through += 1;
                return self.write_value(&Value::Object(event));
            }
            let f = self.field.clone();
            return Err(self.fail(format!(
                "no `{f}` (only metadata events, \"ph\": \"M\", may lack it)"
            )));
        };
        if event.contains_key(&self.local) {
            let l = self.local.clone();
            return Err(self.fail(format!(
                "already has `{l}`: was the file applied already? (the original time is kept \
                 under that name)"
            )));
        }
        let Some(t) = us_to_ns(ts) else {
            let (f, shown) = (self.field.clone(), ts.to_string());
            return Err(self.fail(format!(
                "`{f}` is {}, not a number of microseconds",
                shown.chars().take(40).collect::<String>()
            )));
        };
        let original = ts.clone();
        let (outside, ambiguous) = (self.mapper.outside, self.mapper.ambiguous);
        let mapped = match self.interval.clone() {
            None => self.mapper.map(t),
            Some(names) => {
                let m = self.mapper.map_with_interval(t);
                self.bounds(&mut event, names, m.interval)?;
                m.t_ns
            }
        };
        if self.field == "ts"
            && let Some(dur) = event.get("dur")
        {
            let Some(d) = us_to_ns(dur) else {
                let shown = dur.to_string();
                return Err(self.fail(format!(
                    "`dur` is {}, not a number of microseconds",
                    shown.chars().take(40).collect::<String>()
                )));
            };
            let end = self.mapper.map(t.saturating_add(d));
            event.insert("dur".into(), Self::us(end - mapped));
        }
        // An event whose start or end is outside counts once.
        self.summary.outside_span += u64::from(self.mapper.outside > outside);
        self.summary.ambiguous += u64::from(self.mapper.ambiguous > ambiguous);
        event.insert(self.field.clone(), Self::us(mapped));
        event.insert(self.local.clone(), original);
        self.summary.events += 1;
        self.write_value(&Value::Object(event))
    }
}

/// The array of events, streamed.
struct Events<'s, 'm, 'a, W: Write>(&'s mut State<'m, 'a, W>);

impl<'de, W: Write> Visitor<'de> for Events<'_, '_, '_, W> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an array of trace events")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        use serde::de::Error;
        let state = self.0;
        state.write(b"[").map_err(A::Error::custom)?;
        let mut first = true;
        while let Some(v) = seq.next_element::<Value>()? {
            let Value::Object(event) = v else {
                return Err(A::Error::custom(state.fail("not a JSON object".into())));
            };
            if !first {
                state.write(b",\n").map_err(A::Error::custom)?;
            }
            first = false;
            state.event(event).map_err(A::Error::custom)?;
        }
        state.write(b"]").map_err(A::Error::custom)
    }
}

impl<'de, W: Write> DeserializeSeed<'de> for Events<'_, '_, '_, W> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

/// The document: a bare array or an object holding `traceEvents`.
struct Document<'s, 'm, 'a, W: Write>(&'s mut State<'m, 'a, W>);

impl<'de, W: Write> Visitor<'de> for Document<'_, '_, '_, W> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a Chrome trace: {\"traceEvents\": [...]} or an array of events")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<(), A::Error> {
        Events(self.0).visit_seq(seq)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        use serde::de::Error;
        let state = self.0;
        state.write(b"{").map_err(A::Error::custom)?;
        let mut first = true;
        let mut had_events = false;
        while let Some(key) = map.next_key::<String>()? {
            if !first {
                state.write(b",\n").map_err(A::Error::custom)?;
            }
            first = false;
            let k = serde_json::to_string(&key).expect("a string serializes");
            state.write(k.as_bytes()).map_err(A::Error::custom)?;
            state.write(b":").map_err(A::Error::custom)?;
            if key == "traceEvents" {
                had_events = true;
                map.next_value_seed(Events(&mut *state))?;
            } else {
                let v: Value = map.next_value()?;
                state.write_value(&v).map_err(A::Error::custom)?;
            }
        }
        if !had_events {
            let e = "the object has no `traceEvents` array".to_string();
            state.failure = Some(ApplyError::Events(format!(
                "{}: not a Chrome trace: {e}",
                state.name
            )));
            return Err(A::Error::custom(e));
        }
        state.write(b"}").map_err(A::Error::custom)
    }
}

/// Rewrites a Chrome trace-event JSON document; `field` (default `ts`) in µs, with `interval`
/// its bounds in `args`. `name` names the input in errors (`name:line: event N: …`).
pub fn apply_chrome<R: BufRead, W: Write>(
    input: R,
    name: &str,
    out: W,
    field: &str,
    interval: bool,
    mapper: &mut NodeMapper<'_>,
) -> Result<ApplySummary, ApplyError> {
    let lines = Rc::new(Cell::new(0));
    let reader = LineCounter {
        inner: input,
        lines: lines.clone(),
    };
    let mut state = State {
        out,
        field: field.to_string(),
        local: format!("{field}_local"),
        interval: interval.then(|| super::interval_names(field)),
        mapper,
        summary: ApplySummary::default(),
        failure: None,
        lines,
        name: name.to_string(),
        events: 0,
    };
    let mut de = serde_json::Deserializer::from_reader(reader);
    let parsed = de
        .deserialize_any(Document(&mut state))
        .and_then(|()| de.end());
    if let Some(f) = state.failure.take() {
        return Err(f);
    }
    if let Err(e) = parsed {
        return Err(if e.is_io() {
            ApplyError::io(format!("cannot read {name}"), e.into())
        } else {
            ApplyError::Events(format!(
                "{name}:{}: not a Chrome trace ({{\"traceEvents\": [...]}} or an array of \
                 events): {e}",
                e.line()
            ))
        });
    }
    state
        .write(b"\n")
        .map_err(|_| state.failure.take().expect("set on failure"))?;
    state
        .out
        .flush()
        .map_err(|e| ApplyError::io("cannot write the output", e))?;
    Ok(state.summary)
}
