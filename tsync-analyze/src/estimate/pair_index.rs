//! The accumulator's slot of each trace pair, looked up once per message.
//!
//! With many traces consecutive messages mostly belong to different pairs, so a cache of the
//! last pair misses and the lookup itself is on the per-message path. Pairs (a ≤ b) of traces
//! below [`DENSE_TRACES`] sit in a triangular array, row b holding a = 0..=b: the lookup is an
//! index computation and one load, and the array only grows (rows are appended, never moved)
//! as far as the largest trace index that messages name: b·(b+1)/2 entries of 4 bytes (16
//! traces: 136; 600: 180,300 = 0.7 MiB; at most 2 MiB). Pairs with a larger index go to a hash
//! map, so memory never grows with the square of an arbitrary trace index.

use rustc_hash::FxHashMap;

/// Traces below this index use the triangular array.
const DENSE_TRACES: u64 = 1024;

/// Marks an entry of the array without a slot.
const NONE: u32 = u32::MAX;

/// Slot numbers of ordered trace pairs (a ≤ b).
#[derive(Clone, Debug, Default)]
pub(super) struct PairIndex {
    /// Slot of (a, b) at `b·(b+1)/2 + a`, or [`NONE`].
    dense: Vec<u32>,
    /// Slots of the pairs whose b is at least [`DENSE_TRACES`].
    sparse: FxHashMap<(u32, u32), u32>,
}

/// Where (a, b) sits in the triangular array (a ≤ b); beyond its end when b ≥ [`DENSE_TRACES`].
#[inline(always)]
fn position(a: u32, b: u32) -> u64 {
    debug_assert!(a <= b, "pairs are ordered");
    let b = u64::from(b);
    b * (b + 1) / 2 + u64::from(a)
}

impl PairIndex {
    /// The slot of (a, b) if it has one: the per-message path, one load for a dense pair.
    #[inline(always)]
    pub fn get(&self, a: u32, b: u32) -> Option<u32> {
        let at = position(a, b);
        if at < self.dense.len() as u64 {
            let slot = self.dense[at as usize];
            return (slot != NONE).then_some(slot);
        }
        self.get_sparse(a, b)
    }

    /// The slot of a pair outside the array's current rows (a new row, or a large index).
    #[cold]
    #[inline(never)]
    fn get_sparse(&self, a: u32, b: u32) -> Option<u32> {
        if u64::from(b) < DENSE_TRACES {
            return None;
        }
        self.sparse.get(&(a, b)).copied()
    }

    /// Gives (a, b) slot `slot`.
    #[cold]
    pub fn insert(&mut self, a: u32, b: u32, slot: u32) {
        debug_assert!(slot != NONE, "slot numbers stay below u32::MAX");
        if u64::from(b) >= DENSE_TRACES {
            self.sparse.insert((a, b), slot);
            return;
        }
        let at = position(a, b) as usize;
        // Up to the end of row b.
        let rows_end = position(b, b) as usize + 1;
        if self.dense.len() < rows_end {
            self.dense.resize(rows_end, NONE);
        }
        self.dense[at] = slot;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_of_the_triangle_are_distinct_and_dense() {
        let mut seen = Vec::new();
        for b in 0..40u32 {
            for a in 0..=b {
                seen.push(position(a, b));
            }
        }
        let n = seen.len() as u64;
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen, (0..n).collect::<Vec<_>>());
    }

    #[test]
    fn slots_come_back_for_dense_and_sparse_pairs() {
        let mut index = PairIndex::default();
        let pairs = [
            (0, 1),
            (3, 3),
            (2, 7),
            (0, 1023),
            (1022, 1023),
            (0, 1024),
            (5, 70_000),
            (u32::MAX - 1, u32::MAX),
        ];
        for (slot, &(a, b)) in pairs.iter().enumerate() {
            assert_eq!(index.get(a, b), None, "({a}, {b}) before");
            index.insert(a, b, slot as u32);
        }
        for (slot, &(a, b)) in pairs.iter().enumerate() {
            assert_eq!(index.get(a, b), Some(slot as u32), "({a}, {b})");
        }
        // Neighbours of the pairs set have no slot.
        for (a, b) in [
            (1, 1),
            (0, 2),
            (1, 7),
            (3, 7),
            (1, 1024),
            (0, 0),
            (6, 70_000),
        ] {
            assert_eq!(index.get(a, b), None, "({a}, {b})");
        }
        // The array holds rows 0..=1023 only: the larger indices went to the map.
        assert_eq!(index.dense.len() as u64, position(1023, 1023) + 1);
        assert_eq!(index.sparse.len(), 3);
    }

    #[test]
    fn the_array_grows_only_to_the_largest_row_named() {
        let mut index = PairIndex::default();
        index.insert(0, 15, 0);
        assert_eq!(index.dense.len(), 16 * 17 / 2);
        index.insert(3, 4, 1);
        assert_eq!(
            index.dense.len(),
            16 * 17 / 2,
            "an earlier row is already there"
        );
        assert_eq!((index.get(0, 15), index.get(3, 4)), (Some(0), Some(1)));
    }
}
