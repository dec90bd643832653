//! What matching by digest alone makes of traces: the figure the demo and the VM lab print beside
//! the analyzer's (digests plus sequence ranges), to show what offloads cost without ranges.
use std::path::PathBuf;

use tsync_analyze::{InputSet, MatchOptions, MatchStats, MatchedMessage, MessageSink};

/// Matches `files` by digest only (no pairing by sequence range) and returns the counts.
pub fn digest_only(files: &[PathBuf]) -> anyhow::Result<MatchStats> {
    struct Nothing;
    impl MessageSink for Nothing {
        fn message(&mut self, _: &MatchedMessage<'_>) {}
        fn wants_events(&self) -> bool {
            false
        }
    }
    let options = MatchOptions {
        by_range: false,
        ..MatchOptions::default()
    };
    Ok(InputSet::open(files)?.for_each_message(&options, &mut Nothing, &mut |_| {})?)
}
