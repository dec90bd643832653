//! The live keys of the matcher: a FIFO of entries with a compact hash index over it.
//!
//! Keys are decided in the order they were created, so the entries live in a ring (power-of-two
//! capacity, oldest first) and expiring needs no search. The index is an open-addressing table
//! (linear probing) of 8-byte cells, each the upper bits of the key's hash (the tag), the
//! index's generation and the entry's position: a probe usually touches one cache line and
//! compares full keys only when the tags agree. Because a cell holds everything a probe needs,
//! the table stays small and the ring is only read where a key really is.
//!
//! Expiring the oldest entry touches no cell: positions count every entry ever appended (modulo
//! 2³²), and a cell whose position is no longer between the ring's head and tail is dead — a
//! probe passes over it as over any cell of another key. Dead cells are never reused; once live
//! and dead cells fill half the index, it is emptied in bulk and the live entries are indexed
//! anew, in one pass over the ring. Emptying is a new generation: a cell of an older one counts
//! as empty, so the cells need not be cleared (only every 255th time, when the generation
//! wraps). With four cells per ring slot this happens at most once every ring's worth of new
//! keys and costs a few instructions per key, against the backward-shift deletion of every
//! key's cell it replaces (which also searched for the cell first). Positions stay unambiguous
//! because a dead cell is emptied long before 2³² more entries come.

use crate::huge_pages;
use crate::prefetch::prefetch;

/// A cell no generation wrote: what the index starts as.
const EMPTY: u64 = 0;

/// Index cells per ring slot: at most a quarter of the cells hold live entries, and the index is
/// rebuilt once live and dead ones reach half.
const CELLS_PER_SLOT: usize = 4;

/// One live entry.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Slot<K, V> {
    pub hash: u64,
    pub key: K,
    pub value: V,
}

/// Where a key is: its entry's position, or the empty cell its probe ended at (where its cell
/// goes if it is appended now).
#[derive(Clone, Copy, Debug)]
pub(crate) enum Probe {
    Found(u32),
    Vacant(usize),
}

/// Live keys in creation order, findable by key.
pub(crate) struct LiveKeys<K, V> {
    /// The entry at position `p` is `ring[p & (ring.len() - 1)]`; the live ones are `head`,
    /// `head + 1`, ... `head + len - 1` (wrapping).
    ring: Vec<Slot<K, V>>,
    /// `ring.len() - 1`.
    ring_mask: usize,
    head: u32,
    len: usize,
    /// Index cells: `(tag << 8 | generation) << 32 | position`; [`CELLS_PER_SLOT`] per ring
    /// slot. A cell of another generation than `generation` is empty.
    cells: Vec<u64>,
    /// `cells.len() - 1`.
    cell_mask: usize,
    /// The current generation, 1 to 255.
    generation: u64,
    /// Cells of the current generation (live or dead) when `room` was last set.
    used: usize,
    /// Appends left before [`make_room`](Self::make_room) must run: one counter for the ring
    /// and the index, on the path of every new key.
    room: usize,
    /// What `room` was last set to.
    granted: usize,
}

impl<K: Copy + Default, V: Copy + Default> LiveKeys<K, V> {
    /// An empty set with room for `capacity` entries (rounded up to a power of two) before growing.
    pub fn with_capacity(capacity: usize) -> Self {
        let cap = capacity.max(16).next_power_of_two();
        LiveKeys {
            ring: new_ring(cap),
            ring_mask: cap - 1,
            head: 0,
            len: 0,
            cells: vec![EMPTY; CELLS_PER_SLOT * cap],
            cell_mask: CELLS_PER_SLOT * cap - 1,
            generation: 1,
            used: 0,
            room: cap,
            granted: cap,
        }
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.len
    }

    /// The upper half of the cells of `hash` in the current generation: the hash's upper 24 bits
    /// (the tag; the home cell comes from the lower ones) and the generation.
    #[inline(always)]
    fn tag(&self, hash: u64) -> u64 {
        (hash >> 40) << 8 | self.generation
    }

    /// Whether `c` (a cell's upper half) is of the current generation.
    #[inline(always)]
    fn is_used(&self, upper: u64) -> bool {
        upper as u8 == self.generation as u8
    }

    #[inline(always)]
    fn home(&self, hash: u64) -> usize {
        hash as usize & self.cell_mask
    }

    /// Whether position `p` holds a live entry.
    #[inline(always)]
    fn is_live(&self, p: u32) -> bool {
        (p.wrapping_sub(self.head) as usize) < self.len
    }

    /// The slot of position `p`. Unchecked: on the path of every event (the probe, the insert,
    /// the expiry), where a bounds check the compiler cannot drop costs a load of the length, a
    /// compare and a branch, and makes the calling loop keep the length at hand.
    #[inline(always)]
    fn slot(&self, p: u32) -> &Slot<K, V> {
        let i = p as usize & self.ring_mask;
        debug_assert!(i < self.ring.len());
        // SAFETY: `ring_mask` is always `ring.len() - 1` (both are set together, in
        // `with_capacity` and `make_room`), so the masked index is in range.
        unsafe { self.ring.get_unchecked(i) }
    }

    /// [`slot`](Self::slot), to write.
    #[inline(always)]
    fn slot_mut(&mut self, p: u32) -> &mut Slot<K, V> {
        let i = p as usize & self.ring_mask;
        debug_assert!(i < self.ring.len());
        // SAFETY: as in `slot`: `ring_mask` is `ring.len() - 1`.
        unsafe { self.ring.get_unchecked_mut(i) }
    }

    /// The index cell `i`, to write (`i` is masked, as in [`slot`](Self::slot)).
    #[inline(always)]
    fn cell_mut(&mut self, i: usize) -> &mut u64 {
        let i = i & self.cell_mask;
        debug_assert!(i < self.cells.len());
        // SAFETY: `cell_mask` is always `cells.len() - 1` (both are set together, in
        // `with_capacity` and `make_room`), so the masked index is in range.
        unsafe { self.cells.get_unchecked_mut(i) }
    }

    /// The index cells as a slice `mask + 1` long, and `mask`: a cell index masked with it
    /// needs no bounds check, the compiler sees that it is in range (the one check, here, always
    /// passes: `cell_mask` is `cells.len() - 1`). For the probe's loop over cells.
    #[inline(always)]
    fn cell_table(&self) -> (&[u64], usize) {
        (&self.cells[..=self.cell_mask], self.cell_mask)
    }

    /// Looks `key` (whose hash is `hash`) up.
    #[inline]
    pub fn probe<Q>(&self, hash: u64, key: &Q) -> Probe
    where
        K: KeyEq<Q>,
    {
        let (cells, mask) = self.cell_table();
        let tag = self.tag(hash);
        let mut i = self.home(hash);
        loop {
            let c = cells[i];
            let upper = c >> 32;
            if upper == tag {
                // A dead cell of the key may come before its live one (the key was decided and
                // seen again): whether it is live is asked only once the key agrees.
                let p = c as u32;
                if self.slot(p).key.key_eq(key) && self.is_live(p) {
                    return Probe::Found(p);
                }
            } else if !self.is_used(upper) {
                return Probe::Vacant(i);
            }
            i = (i + 1) & mask;
        }
    }

    /// The value of the live entry at position `p` (from [`probe`](Self::probe)).
    #[inline(always)]
    pub fn value_mut(&mut self, p: u32) -> &mut V {
        &mut self.slot_mut(p).value
    }

    /// The live entry of `key` (whose hash is `hash`).
    #[cfg(test)]
    pub fn find_mut(&mut self, hash: u64, key: &K) -> Option<&mut V>
    where
        K: KeyEq,
    {
        match self.probe(hash, key) {
            Probe::Found(p) => Some(self.value_mut(p)),
            Probe::Vacant(_) => None,
        }
    }

    /// Appends an entry for a key that is not live (the caller checked with [`find_mut`]).
    #[cfg(test)]
    pub fn push_back(&mut self, hash: u64, key: K, value: V)
    where
        K: KeyEq,
    {
        let Probe::Vacant(cell) = self.probe(hash, &key) else {
            panic!("the key is live");
        };
        *self.push_back_at(cell, hash, key) = value;
    }

    /// Appends an entry for a key that is not live, its cell going to `cell`, where its
    /// [`probe`](Self::probe) ended (nothing changed the set since), and returns its value to fill
    /// in, in place: building a whole value and copying it into the ring costs twice the stores,
    /// on the path of every new key. The value still holds what an entry that left the slot
    /// held: the caller sets every field it will read.
    #[inline]
    pub fn push_back_at(&mut self, cell: usize, hash: u64, key: K) -> &mut V {
        let mut cell = cell;
        if self.room == 0 {
            self.make_room();
            cell = self.vacant_cell(hash);
        }
        debug_assert!(!self.is_used(self.cells[cell] >> 32));
        self.room -= 1;
        let p = self.head.wrapping_add(self.len as u32);
        self.len += 1;
        *self.cell_mut(cell) = self.tag(hash) << 32 | u64::from(p);
        let slot = self.slot_mut(p);
        slot.hash = hash;
        slot.key = key;
        &mut slot.value
    }

    /// The first empty cell of `hash`'s probe sequence.
    #[inline]
    fn vacant_cell(&self, hash: u64) -> usize {
        let (cells, mask) = self.cell_table();
        let mut i = self.home(hash);
        while self.is_used(cells[i] >> 32) {
            i = (i + 1) & mask;
        }
        i
    }

    /// The oldest live entry.
    #[inline]
    pub fn front(&self) -> Option<&Slot<K, V>> {
        (self.len > 0).then(|| self.slot(self.head))
    }

    /// Removes and returns the oldest live entry.
    #[cfg(test)]
    pub fn pop_front(&mut self) -> Option<Slot<K, V>> {
        let slot = *self.front()?;
        self.drop_front();
        Some(slot)
    }

    /// Removes the oldest live entry (if any): its cell turns dead by itself.
    #[inline(always)]
    pub fn drop_front(&mut self) {
        if self.len == 0 {
            return;
        }
        self.prefetch_ahead();
        self.head = self.head.wrapping_add(1);
        self.len -= 1;
    }

    /// Starts loading the home cell of `hash` (see [`crate::matching::keys::KeyMatcher::prefetch`]).
    #[inline]
    pub fn prefetch_home(&self, hash: u64) {
        // (A hint: the address needs no bounds check, a prefetch never faults.)
        prefetch(self.cells.as_ptr().wrapping_add(self.home(hash)));
    }

    /// Asks for the entry popped a few calls from now: the front of the ring was written a whole
    /// window ago and has left the caches, and the hardware prefetcher does not look that far.
    #[inline]
    fn prefetch_ahead(&self) {
        const AHEAD: u32 = 8;
        let slot = self.slot(self.head.wrapping_add(AHEAD));
        let p = (slot as *const Slot<K, V>).cast::<u8>();
        for line in (0..std::mem::size_of::<Slot<K, V>>()).step_by(64) {
            prefetch(p.wrapping_add(line));
        }
    }

    /// Before appending, when the appends granted are used up: grants more if the ring and the
    /// index have room, else doubles the ring if it is full, and empties the index (doubling it
    /// too if the ring doubled) and indexes the live entries again, in a new generation.
    #[cold]
    #[inline(never)]
    fn make_room(&mut self) {
        self.used += self.granted - self.room;
        if self.len < self.ring.len() && 2 * (self.used + 1) <= self.cells.len() {
            self.grant();
            return;
        }
        if self.len == self.ring.len() {
            let cap = self.ring.len();
            let mut ring = new_ring(2 * cap);
            for i in 0..self.len as u32 {
                let p = self.head.wrapping_add(i);
                ring[p as usize & (2 * cap - 1)] = *self.slot(p);
            }
            self.ring = ring;
            self.ring_mask = 2 * cap - 1;
        }
        let cells = CELLS_PER_SLOT * self.ring.len();
        assert!(
            cells <= 1 << 31,
            "more live packet keys than the matcher can index"
        );
        if self.cells.len() != cells {
            self.cells = vec![EMPTY; cells];
            self.cell_mask = cells - 1;
            self.generation = 1;
        } else if self.generation == 255 {
            self.cells.fill(EMPTY);
            self.generation = 1;
        } else {
            self.generation += 1;
        }
        for i in 0..self.len as u32 {
            let p = self.head.wrapping_add(i);
            let hash = self.slot(p).hash;
            let cell = self.vacant_cell(hash);
            self.cells[cell] = self.tag(hash) << 32 | u64::from(p);
        }
        self.used = self.len;
        self.grant();
    }

    /// Sets `room` to the appends the ring and the index (up to half full) have room for.
    fn grant(&mut self) {
        self.room = (self.ring.len() - self.len).min(self.cells.len() / 2 - self.used);
        self.granted = self.room;
    }
}

/// A ring of `len` empty slots. It is written whole here, so a ring of megabytes is asked for in
/// huge pages ([`huge_pages`]): on a busy network the ring doubles to several MiB, and its first
/// writes page-faulted 2,200 times on 16 bench traces (a fifth of the run's faults).
fn new_ring<K: Copy + Default, V: Copy + Default>(len: usize) -> Vec<Slot<K, V>> {
    let mut ring = Vec::with_capacity(len);
    huge_pages::advise(ring.as_ptr(), len * std::mem::size_of::<Slot<K, V>>());
    ring.resize(len, Slot::default());
    ring
}

/// Key equality as the index needs it (a branch-free comparison for wide keys), with a key of
/// the table's type or another form of it (`Q`, what a probe is given).
pub(crate) trait KeyEq<Q = Self> {
    fn key_eq(&self, other: &Q) -> bool;
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
            // Few distinct homes (the low bits) and tags (the upper ones): long probe runs,
            // wrap-around, equal tags, dead cells of the same key before its live one.
            check(&ops, |k| (k % 5) | (k % 3) << 40)?;
        }
    }

    #[test]
    fn emptied_index_generations_wrap_without_losing_or_reviving_keys() {
        // A handful of live keys in the smallest table: the index is emptied every few dozen
        // new keys, thousands of times, so the generation wraps many times; the positions
        // start just before 2³² and wrap too.
        let mut t: LiveKeys<u64, u64> = LiveKeys::with_capacity(16);
        t.head = u32::MAX - 1000;
        let h = |k: u64| k.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        for k in 0..200_000u64 {
            t.push_back(h(k), k, k + 1);
            if k >= 5 {
                let s = t.pop_front().expect("not empty");
                assert_eq!((s.key, s.value), (k - 5, k - 4));
                // Decided keys are gone, live ones are there.
                assert_eq!(t.find_mut(h(k - 5), &(k - 5)), None);
                assert_eq!(t.find_mut(h(k - 4), &(k - 4)).copied(), Some(k - 3));
            }
        }
        assert_eq!(t.len(), 5);
        assert_eq!(t.cells.len(), CELLS_PER_SLOT * 16);
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
