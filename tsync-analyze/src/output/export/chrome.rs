//! The network timeline as a Chrome trace-event JSON document, for Perfetto (ui.perfetto.dev)
//! and chrome://tracing: one process per node, each send and receive as a zero-length slice
//! named after the packet, each matched message as a flow arrow from its send to its receive,
//! and the pairs' accuracy as the document's metadata.
//!
//! Flows are written in the v2 form (`bind_id` with `flow_out` on the send, `flow_in` on the
//! receive) on the events themselves, so that an arrow needs no enclosing slice and holds
//! whichever end the corrected order writes first. Times are the corrected nanoseconds as
//! microseconds with three decimals (`ts`, the unit of the format), on the reference's clock:
//! small numbers that a double holds to the nanosecond, which Perfetto shows from the trace's
//! start.

use super::*;

/// Writes the Chrome trace-event JSON document.
pub struct ChromeExporter<W: Write> {
    out: W,
    nodes: Vec<String>,
    metadata: serde_json::Value,
}

/// Corrected nanoseconds as the format's microseconds, exact to the ns (3 decimals).
fn micros(ns: i64) -> serde_json::Value {
    if ns % 1000 == 0 {
        serde_json::Value::from(ns / 1000)
    } else {
        serde_json::Value::from(ns as f64 / 1000.0)
    }
}

impl<W: Write> ChromeExporter<W> {
    /// Writes the document's start and one process (named after the node) per node.
    pub fn new(
        mut out: W,
        nodes: &[String],
        metadata: serde_json::Value,
    ) -> Result<Self, ExportError> {
        out.write_all(b"{\"traceEvents\":[\n")?;
        for (pid, name) in nodes.iter().enumerate() {
            let process = serde_json::json!({
                "ph": "M", "name": "process_name", "pid": pid, "tid": 0,
                "args": { "name": name },
            });
            let order = serde_json::json!({
                "ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0,
                "args": { "sort_index": pid },
            });
            let thread = serde_json::json!({
                "ph": "M", "name": "thread_name", "pid": pid, "tid": 0,
                "args": { "name": "packets" },
            });
            for m in [process, order, thread] {
                serde_json::to_writer(&mut out, &m).map_err(std::io::Error::from)?;
                out.write_all(b",\n")?;
            }
        }
        Ok(ChromeExporter {
            out,
            nodes: nodes.to_vec(),
            metadata,
        })
    }

    /// Writes one event.
    pub fn write(&mut self, e: &ExportEvent<'_>) -> Result<(), ExportError> {
        let record = EventRecord::new(e, &self.nodes)?;
        let send = e.event.direction == direction::SEND;
        let name = format!(
            "{} {} {}:{} → {}:{}",
            record.direction, record.kind, record.saddr, record.source, record.daddr, record.dest
        );
        let mut event = serde_json::json!({
            "name": name,
            "cat": "packet",
            "ph": "X",
            "ts": micros(e.corrected_ns),
            "dur": 0,
            "pid": e.node,
            "tid": 0,
            "args": record,
        });
        if let Some(peer) = e.peer {
            // The flow is named after its send event, known at both ends.
            let (node, index) = if send {
                (e.node, e.index)
            } else {
                (peer.node, peer.index)
            };
            let o = event.as_object_mut().expect("an object");
            o.insert("bind_id".into(), format!("{node}.{index}").into());
            o.insert(
                if send { "flow_out" } else { "flow_in" }.into(),
                true.into(),
            );
        }
        serde_json::to_writer(&mut self.out, &event).map_err(std::io::Error::from)?;
        self.out.write_all(b",\n")?;
        Ok(())
    }

    /// Ends the array, adds the metadata and flushes; the writer must not be used afterwards.
    pub fn close(&mut self) -> Result<(), ExportError> {
        // A last metadata event, so that no event needs to know it is the last one.
        let end = serde_json::json!({
            "ph": "M", "name": "tsync", "pid": 0, "tid": 0,
            "args": { "note": "end of the tsync export" },
        });
        serde_json::to_writer(&mut self.out, &end).map_err(std::io::Error::from)?;
        self.out
            .write_all(b"\n],\n\"displayTimeUnit\":\"ns\",\n\"metadata\":")?;
        serde_json::to_writer(&mut self.out, &self.metadata).map_err(std::io::Error::from)?;
        self.out.write_all(b"}\n")?;
        self.out.flush()?;
        Ok(())
    }
}
