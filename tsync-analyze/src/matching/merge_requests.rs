//! The chunks the merge asks the decoding pool for when there are more files than are decoded
//! ahead each ([`Demand::Requested`](crate::input::ahead::Demand)): a child of the merge, whose
//! streams it reads.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::Stream;

/// The chunks asked for ahead when the files are decoded on request (more files than are
/// decoded ahead each): those of the files whose chunk in hand ends first on the merge axis, the
/// next ones the merge will need, up to a budget of half the files (at least
/// [`REQUESTS_PER_DECODER`] per decoding thread). Recordings close their chunks at the same
/// instants (a clock sample a second), so many files need their next chunk at almost the same
/// moment: with a budget of a few chunks, a fifth of the 100-file simulation's refills found
/// theirs decoded; with half the files, 86 %. Memory stays at one chunk per file plus the budget,
/// against five per file for the files decoded ahead.
pub(super) struct Requests {
    /// Chunks asked for and not taken yet (files whose `requested` is set).
    outstanding: usize,
    budget: usize,
    /// Files holding a chunk from the pool and no request, by `chunk_end` (stale entries are
    /// passed over).
    soon: BinaryHeap<Reverse<(i64, usize)>>,
}

/// Chunks asked for ahead per decoding thread ([`Requests`]).
const REQUESTS_PER_DECODER: usize = 2;

impl Requests {
    pub(super) fn new(decoders: usize, files: usize) -> Self {
        Requests {
            outstanding: 0,
            budget: (REQUESTS_PER_DECODER * decoders.max(1)).max(files / 2),
            soon: BinaryHeap::new(),
        }
    }

    /// Notes the chunk stream `i` now holds (`more`: it holds one; false at its end), takes its
    /// request off the budget if it was one, and asks for more chunks.
    pub(super) fn refilled(&mut self, i: usize, more: bool, streams: &mut [Stream]) {
        let st = &mut streams[i];
        if std::mem::take(&mut st.requested) {
            self.outstanding -= 1;
        }
        if more {
            self.holds(i, st);
        }
        self.top_up(streams);
    }

    /// Puts stream `i` in line for a request.
    pub(super) fn holds(&mut self, i: usize, st: &mut Stream) {
        st.chunk_end = st.chunk().0.last().map_or(i64::MIN, |e| st.aligned(e));
        self.soon.push(Reverse((st.chunk_end, i)));
    }

    /// Asks for the chunks of the files whose chunk in hand ends first, up to the budget.
    pub(super) fn top_up(&mut self, streams: &mut [Stream]) {
        while self.outstanding < self.budget {
            let Some(Reverse((end, j))) = self.soon.pop() else {
                return;
            };
            let st = &mut streams[j];
            if st.requested || st.chunk_end != end {
                continue;
            }
            if st.file.request_ahead() {
                st.requested = true;
                self.outstanding += 1;
            }
        }
    }
}
