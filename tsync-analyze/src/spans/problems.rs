//! What a span file says about itself: one line that says what was read and which attribute
//! named the nodes, and a warning for every kind of span that could not be used, each with its
//! count and what to do. Bad spans never stop the analysis and never give a message: they are
//! left out, counted, and named here.

use super::SpanStats;

/// The summary line and the warnings of one span file.
pub(crate) fn warnings(s: &SpanStats) -> Vec<String> {
    let f = &s.file;
    let j = &s.join;
    let mut w = Vec::new();
    let mut by_attribute: Vec<(String, Vec<&str>)> = Vec::new();
    for n in &s.nodes {
        match by_attribute.iter_mut().find(|(a, _)| *a == n.attribute) {
            Some((_, names)) => names.push(&n.name),
            None => by_attribute.push((n.attribute.clone(), vec![&n.name])),
        }
    }
    let named: Vec<String> = by_attribute
        .iter()
        .map(|(a, names)| format!("`{a}` ({})", names.join(", ")))
        .collect();
    w.push(format!(
        "spans {f}: {} spans of {} nodes, each named by its resource's {}; {} messages from {} \
         cross-node pairs ({} requests, {} responses, {} through queues, {} RPC message events); \
         times are each node's CLOCK_REALTIME in ns since the file's epoch {} ns",
        j.spans,
        s.nodes.len(),
        named.join(", "),
        s.messages(),
        j.cross_node_pairs,
        s.requests,
        s.responses,
        s.queued,
        s.message_events,
        s.epoch_ns
    ));
    if !s.joined.is_empty() {
        let joined: Vec<String> = s
            .joined
            .iter()
            .map(|j| {
                if j.node == j.trace {
                    j.node.clone()
                } else {
                    format!("{} (trace {})", j.node, j.trace)
                }
            })
            .collect();
        w.push(format!(
            "spans {f}: the nodes {} have agent traces of their own: their span messages' times \
             went onto those traces' clocks through the agents' realtime samples (widened by the \
             conversion's bound) and joined their packets; one map per node",
            joined.join(", ")
        ));
    }
    for j in &s.joined {
        if let Some(why) = &j.unusable {
            w.push(format!(
                "spans {f}: node {}: its span messages were dropped: {why}, so its realtime \
                 cannot be put on the trace's clock",
                j.node
            ));
        }
    }
    let mut warn = |n: u64, text: String| {
        if n > 0 {
            w.push(format!("spans {f}: {text}"));
        }
    };
    warn(
        s.without_node,
        format!(
            "{} spans of resources without {} left out (their node is unknown; \
             --node-attribute KEY names another resource attribute)",
            s.without_node, s.attribution
        ),
    );
    warn(
        s.without_id,
        format!(
            "{} spans without a trace id or span id left out",
            s.without_id
        ),
    );
    warn(
        u64::from(s.nodes.len() == 1),
        format!(
            "every span ran on node {}: one clock, nothing to synchronize",
            s.nodes.first().map_or("", |n| n.name.as_str())
        ),
    );
    warn(
        u64::from(j.spans > 0 && j.roots == j.spans),
        "no span has a parent: no pair, no message (were the spans exported without their \
         parents' ids?)"
            .into(),
    );
    warn(
        j.parent_not_found,
        format!(
            "{} spans whose parent did not come within {} spans of them in the file: missing \
             from the file (a service that is not traced or not exported), or farther away \
             (--span-window N keeps more); they give no message",
            j.parent_not_found, s.window
        ),
    );
    warn(
        j.without_kind,
        format!(
            "{} spans without a kind (SPAN_KIND_UNSPECIFIED); {} cross-node pairs with such a \
             span give no message: only CLIENT/SERVER and PRODUCER/CONSUMER pairs say which \
             way a message went",
            j.without_kind, j.without_kind_pairs
        ),
    );
    warn(
        j.no_rule_pairs,
        format!(
            "{} cross-node pairs whose kinds fit no rule (neither CLIENT → SERVER nor PRODUCER → \
             CONSUMER) give no message",
            j.no_rule_pairs
        ),
    );
    warn(
        j.duplicates,
        format!(
            "{} span ids seen twice with different contents (ids reused, or spans of two \
             files mixed up): the {} pairs with either copy give no message",
            j.duplicates, j.duplicate_pairs
        ),
    );
    warn(
        j.repeated,
        format!(
            "{} exact copies of spans (an exporter's retry) read once",
            j.repeated
        ),
    );
    warn(
        j.backwards,
        format!(
            "{} spans end before they start: their node's clock was stepped back while they \
             ran (NTP, a manual change); they give no message. A step between spans is not \
             visible in the spans: it makes the pair's hulls cross (`approximate`)",
            j.backwards
        ),
    );
    warn(
        j.unset_times,
        format!(
            "{} cross-node pairs lack a start or end time a rule needs (unset, or dropped \
             with a backwards span)",
            j.unset_times
        ),
    );
    warn(
        j.ambiguous_message_events,
        format!(
            "{} RPC message events whose `message.id` is not unique on their side give no \
             message",
            j.ambiguous_message_events
        ),
    );
    warn(
        s.off_samples,
        format!(
            "{} messages of nodes with agent traces dropped: a time outside the agent's clock \
             samples (before its first or after its last), or within reach of a realtime step, \
             cannot be put on the trace's clock for certain",
            s.off_samples
        ),
    );
    warn(
        s.joined_same_trace,
        format!(
            "{} messages between span nodes that joined one agent trace (one clock) dropped",
            s.joined_same_trace
        ),
    );
    warn(
        u64::from(s.cut_short),
        "the last line (or protobuf frame) is cut short (the file was still being written?): it \
         was not read"
            .into(),
    );
    w
}
