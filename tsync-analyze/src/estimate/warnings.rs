//! What a synchronization says about traces it could not put on one timebase: a single input,
//! groups that share no messages, traces related to nothing. Listed, never one warning per trace:
//! a text file may declare thousands.

use crate::estimate::reduction::Reduction;

/// How many names a warning lists before it says "and N more".
const LISTED_NAMES: usize = 8;

/// `names` joined with commas, the first [`LISTED_NAMES`] only.
fn name_list(names: &[&str]) -> String {
    if names.len() <= LISTED_NAMES {
        return names.join(", ");
    }
    format!(
        "{} and {} more",
        names[..LISTED_NAMES].join(", "),
        names.len() - LISTED_NAMES
    )
}

/// The warnings that say which traces are not on a common timebase: a single input, groups that
/// share no messages, traces related to nothing (listed, not one warning each: a text file may
/// declare thousands of traces).
pub(super) fn unsynchronized(red: &Reduction, trace_names: &[String]) -> Vec<String> {
    if trace_names.len() == 1 {
        return vec![format!(
            "only one trace ({}): there is nothing to synchronize it with; give the trace \
             files of all nodes (or a text file declaring several traces)",
            trace_names[0]
        )];
    }
    let mut warnings = Vec::new();
    let alone: Vec<&str> = red
        .traces
        .iter()
        .zip(trace_names)
        .filter(|(t, _)| !t.synchronized)
        .map(|(_, n)| n.as_str())
        .collect();
    let mut groups: Vec<Vec<&str>> = vec![Vec::new(); red.groups as usize];
    for (t, name) in red.traces.iter().zip(trace_names) {
        if t.synchronized {
            groups[t.group as usize].push(name);
        }
    }
    let shared: Vec<String> = groups
        .iter()
        .enumerate()
        .filter(|(_, m)| !m.is_empty())
        .map(|(g, m)| format!("group {g}: {}", name_list(m)))
        .collect();
    if shared.len() > 1 {
        warnings.push(format!(
            "the traces form {} groups that share no usable messages; each group has its own \
             reference and timebase, and times of different groups are NOT comparable ({})",
            shared.len(),
            shared.join("; ")
        ));
    }
    match alone.as_slice() {
        [] => {}
        [one] => warnings.push(format!(
            "trace {one} could not be related to any other trace: it is NOT synchronized (left \
             on its own clock)"
        )),
        many => warnings.push(format!(
            "{} traces could not be related to any other trace: they are NOT synchronized (left \
             on their own clocks): {}",
            many.len(),
            name_list(many)
        )),
    }
    warnings
}
