//! The live keys of the matcher: a FIFO of entries with a compact hash index over it.
//!
//! Keys are decided in the order they were created, so the entries live in a ring (power-of-two
//! capacity, oldest first) and expiring needs no search. The index is an open-addressing table
//! (linear probing) of 8-byte cells, each the upper 32 bits of the key's hash (the tag) and the
//! entry's ring position: one cell per live key, at most half the cells used, so a probe usually
//! touches one cache line and compares full keys only when the tags agree. Because a cell holds
//! everything a probe needs, the table stays small (8 bytes per slot; 512 KiB for the ~20 000 live
//! keys of a 2 s window at 10⁴ messages/s) and the ring is only read where a key really is.
//!
//! Removing the oldest entry (when it is decided) erases its cell with backward-shift deletion, so
//! the table never holds dead cells and probe sequences stay short whatever the trace length.

/// An empty index cell (no ring position reaches 2³² − 1).
const EMPTY: u64 = u64::MAX;

/// One live entry.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Slot<K, V> {
    pub hash: u64,
    pub key: K,
    pub value: V,
}

/// Live keys in creation order, findable by key.
pub(crate) struct LiveKeys<K, V> {
    /// `ring[(head + i) & (ring.len() - 1)]` is the i-th oldest live entry.
    ring: Vec<Slot<K, V>>,
    head: usize,
    len: usize,
    /// Index cells: `tag << 32 | ring position`, or [`EMPTY`]; twice as many as ring slots.
    cells: Vec<u64>,
}

impl<K: Copy + Default + KeyEq, V: Copy + Default> LiveKeys<K, V> {
    /// An empty set with room for `capacity` entries (rounded up to a power of two) before growing.
    pub fn with_capacity(capacity: usize) -> Self {
        let cap = capacity.max(16).next_power_of_two();
        LiveKeys {
            ring: vec![Slot::default(); cap],
            head: 0,
            len: 0,
            cells: vec![EMPTY; 2 * cap],
        }
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.len
    }

    #[inline]
    fn home(&self, tag: u64) -> usize {
        tag as usize & (self.cells.len() - 1)
    }

    /// The live entry of `key` (whose hash is `hash`).
    #[inline]
    pub fn find_mut(&mut self, hash: u64, key: &K) -> Option<&mut V> {
        let mask = self.cells.len() - 1;
        let tag = hash >> 32;
        let mut i = self.home(tag);
        loop {
            let c = self.cells[i];
            if c == EMPTY {
                return None;
            }
            if c >> 32 == tag {
                let pos = c as u32 as usize;
                if self.ring[pos].key.key_eq(key) {
                    return Some(&mut self.ring[pos].value);
                }
            }
            i = (i + 1) & mask;
        }
    }

    /// Appends an entry for a key that is not live (the caller checked with [`find_mut`]).
    #[cfg(test)]
    pub fn push_back(&mut self, hash: u64, key: K, value: V) {
        *self.push_back_with(hash, key) = value;
    }

    /// Appends an entry for a key that is not live (the caller checked with [`find_mut`]) and
    /// returns its value to fill in, in place: building a whole value and copying it into the
    /// ring costs twice the stores, on the path of every new key. The value still holds what an
    /// entry that left the slot held: the caller sets every field it will read.
    #[inline]
    pub fn push_back_with(&mut self, hash: u64, key: K) -> &mut V {
        if self.len == self.ring.len() {
            self.grow();
        }
        let pos = (self.head + self.len) & (self.ring.len() - 1);
        self.len += 1;
        self.index(hash, pos);
        let slot = &mut self.ring[pos];
        slot.hash = hash;
        slot.key = key;
        &mut slot.value
    }

    #[inline]
    fn index(&mut self, hash: u64, pos: usize) {
        let mask = self.cells.len() - 1;
        let tag = hash >> 32;
        let mut i = self.home(tag);
        while self.cells[i] != EMPTY {
            i = (i + 1) & mask;
        }
        self.cells[i] = tag << 32 | pos as u64;
    }

    /// The oldest live entry.
    #[inline]
    pub fn front(&self) -> Option<&Slot<K, V>> {
        (self.len > 0).then(|| &self.ring[self.head])
    }

    /// Removes and returns the oldest live entry.
    #[cfg(test)]
    pub fn pop_front(&mut self) -> Option<Slot<K, V>> {
        let slot = *self.front()?;
        self.drop_front();
        Some(slot)
    }

    /// Removes the oldest live entry (if any).
    #[inline(always)]
    pub fn drop_front(&mut self) {
        if self.len == 0 {
            return;
        }
        let pos = self.head;
        self.prefetch_ahead();
        self.unindex(self.ring[pos].hash, pos);
        self.head = (self.head + 1) & (self.ring.len() - 1);
        self.len -= 1;
    }

    /// Starts loading the home cell of `hash` (see [`crate::matching::keys::KeyMatcher::prefetch`]).
    #[inline]
    pub fn prefetch_home(&self, hash: u64) {
        prefetch(&self.cells[self.home(hash >> 32)]);
    }

    /// Asks for the entry popped a few calls from now: the front of the ring was written a whole
    /// window ago and has left the caches, and the hardware prefetcher does not look that far.
    #[inline]
    fn prefetch_ahead(&self) {
        const AHEAD: usize = 8;
        let mask = self.ring.len() - 1;
        let slot = &self.ring[(self.head + AHEAD) & mask];
        let p = (slot as *const Slot<K, V>).cast::<u8>();
        for line in (0..std::mem::size_of::<Slot<K, V>>()).step_by(64) {
            prefetch(p.wrapping_add(line));
        }
        // The entry half as far ahead was asked for earlier: its index cell, which removing it
        // will search, is as cold as it was.
        if AHEAD / 2 < self.len {
            let soon = &self.ring[(self.head + AHEAD / 2) & mask];
            prefetch(&self.cells[self.home(soon.hash >> 32)]);
        }
    }

    /// Erases the cell of the entry at `pos`, shifting later cells of the probe run back so that
    /// every remaining key stays reachable from its home cell.
    #[inline]
    fn unindex(&mut self, hash: u64, pos: usize) {
        let mask = self.cells.len() - 1;
        let tag = hash >> 32;
        let cell = tag << 32 | pos as u64;
        let mut hole = self.home(tag);
        while self.cells[hole] != cell {
            debug_assert!(
                self.cells[hole] != EMPTY,
                "live entry missing from the index"
            );
            hole = (hole + 1) & mask;
        }
        let mut j = hole;
        loop {
            j = (j + 1) & mask;
            let c = self.cells[j];
            if c == EMPTY {
                break;
            }
            // The cell at j may fill the hole unless its home lies cyclically in (hole, j].
            let home = self.home(c >> 32);
            if (j.wrapping_sub(home) & mask) >= (j.wrapping_sub(hole) & mask) {
                self.cells[hole] = c;
                hole = j;
            }
        }
        self.cells[hole] = EMPTY;
    }

    /// Doubles the ring (entries move to positions 0..len) and rebuilds the index.
    #[cold]
    fn grow(&mut self) {
        let cap = self.ring.len();
        let mut ring = vec![Slot::default(); 2 * cap];
        for (i, r) in ring.iter_mut().take(self.len).enumerate() {
            *r = self.ring[(self.head + i) & (cap - 1)];
        }
        self.ring = ring;
        self.head = 0;
        self.cells = vec![EMPTY; 4 * cap];
        for pos in 0..self.len {
            self.index(self.ring[pos].hash, pos);
        }
    }
}

/// Starts loading the cache line at `p` (a hint: no effect on results, never faults).
#[inline(always)]
fn prefetch<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        // SAFETY: a prefetch is a hint that never faults, whatever the address, and SSE is part
        // of the x86_64 baseline.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(p.cast::<i8>()) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Key equality as the index needs it (a branch-free comparison for wide keys).
pub(crate) trait KeyEq {
    fn key_eq(&self, other: &Self) -> bool;
}

impl KeyEq for u64 {
    #[inline]
    fn key_eq(&self, other: &Self) -> bool {
        self == other
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::VecDeque;

    #[derive(Clone, Debug)]
    enum Op {
        /// Push key (if not live) or bump its value (if live).
        Touch(u64),
        Pop,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0u64..200).prop_map(Op::Touch),
            1 => Just(Op::Pop),
        ]
    }

    /// Runs the ops on the table and on a plain FIFO with linear search; `hash` may collide a lot.
    fn check(ops: &[Op], hash: fn(u64) -> u64) -> Result<(), TestCaseError> {
        let mut t: LiveKeys<u64, u32> = LiveKeys::with_capacity(1);
        let mut model: VecDeque<(u64, u32)> = VecDeque::new();
        for o in ops {
            match *o {
                Op::Touch(k) => {
                    let m = model.iter_mut().find(|e| e.0 == k);
                    match (t.find_mut(hash(k), &k), m) {
                        (Some(v), Some(m)) => {
                            prop_assert_eq!(*v, m.1);
                            *v += 1;
                            m.1 += 1;
                        }
                        (None, None) => {
                            t.push_back(hash(k), k, 1);
                            model.push_back((k, 1));
                        }
                        (a, b) => prop_assert!(false, "key {k}: table {a:?}, model {b:?}"),
                    }
                }
                Op::Pop => {
                    let a = t.pop_front().map(|s| (s.key, s.value));
                    prop_assert_eq!(a, model.pop_front());
                }
            }
            prop_assert_eq!(t.len(), model.len());
            prop_assert_eq!(t.front().map(|s| s.key), model.front().map(|e| e.0));
        }
        // Every live key is still found after all the shifting.
        for &(k, v) in &model {
            prop_assert_eq!(t.find_mut(hash(k), &k).copied(), Some(v));
        }
        Ok(())
    }

    proptest! {
        #[test]
        fn behaves_like_a_fifo_with_search(ops in prop::collection::vec(op(), 0..600)) {
            check(&ops, |k| k.wrapping_mul(0x9E37_79B9_7F4A_7C15))?;
        }

        #[test]
        fn survives_colliding_homes_and_tags(ops in prop::collection::vec(op(), 0..600)) {
            // Few distinct tags and homes: long probe runs, wrap-around and equal tags.
            check(&ops, |k| (k % 5) << 32 | k)?;
        }
    }

    #[test]
    fn grows_and_wraps_around() {
        let mut t: LiveKeys<u64, u64> = LiveKeys::with_capacity(16);
        let h = |k: u64| k.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let mut next_pop = 0;
        for k in 0..10_000u64 {
            t.push_back(h(k), k, k * 2);
            if k % 3 == 0 {
                let s = t.pop_front().expect("not empty");
                assert_eq!((s.key, s.value), (next_pop, next_pop * 2));
                next_pop += 1;
            }
        }
        for k in next_pop..10_000 {
            assert_eq!(t.find_mut(h(k), &k).copied(), Some(k * 2));
        }
        assert_eq!(t.find_mut(h(10_000), &10_000), None);
    }
}
