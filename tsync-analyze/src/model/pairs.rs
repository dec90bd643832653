//! Tables keyed by ordered trace pair, behind the per-pair tables (the text exchanges, `l_min`);
//! the accumulator's slots, looked up per message, have a leaner index of their own
//! (`estimate/pair_index.rs`).
//!
//! Pairs of small trace indices (the usual case) sit in a flat array, so a lookup on the
//! per-message hot path is one load; pairs with a larger index go to a hash map, so memory grows
//! with the pairs that messages name, never with the square of a (declared) trace count.

use rustc_hash::FxHashMap;

/// Traces below this index use the flat array (DENSE² entries, allocated on first use).
const DENSE: usize = 256;

/// A table of `T` keyed by the ordered trace pair (a, b).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct PairTable<T> {
    dense: Vec<Option<T>>,
    sparse: FxHashMap<(u32, u32), T>,
}

impl<T> Default for PairTable<T> {
    fn default() -> Self {
        PairTable {
            dense: Vec::new(),
            sparse: FxHashMap::default(),
        }
    }
}

#[inline]
fn dense_index(a: u32, b: u32) -> Option<usize> {
    ((a | b) < DENSE as u32).then(|| a as usize * DENSE + b as usize)
}

impl<T> PairTable<T> {
    /// The value of (a, b), if set.
    #[inline]
    pub fn get(&self, a: u32, b: u32) -> Option<&T> {
        match dense_index(a, b) {
            // An empty (never allocated) array has no entry either.
            Some(i) => self.dense.get(i)?.as_ref(),
            None => self.sparse.get(&(a, b)),
        }
    }

    /// The value of (a, b), set to `make()` first if there is none.
    #[inline]
    pub fn get_or_insert_with(&mut self, a: u32, b: u32, make: impl FnOnce() -> T) -> &mut T {
        match dense_index(a, b) {
            Some(i) => self.dense_mut()[i].get_or_insert_with(make),
            None => self.sparse.entry((a, b)).or_insert_with(make),
        }
    }

    /// Sets the value of (a, b).
    pub fn insert(&mut self, a: u32, b: u32, value: T) {
        match dense_index(a, b) {
            Some(i) => self.dense_mut()[i] = Some(value),
            None => {
                self.sparse.insert((a, b), value);
            }
        }
    }

    /// The flat array, allocated on first use.
    #[inline]
    fn dense_mut(&mut self) -> &mut Vec<Option<T>> {
        if self.dense.is_empty() {
            self.dense.resize_with(DENSE * DENSE, || None);
        }
        &mut self.dense
    }

    /// Removes the value of (a, b).
    #[inline]
    pub fn remove(&mut self, a: u32, b: u32) {
        match dense_index(a, b) {
            Some(i) => {
                if let Some(slot) = self.dense.get_mut(i) {
                    *slot = None;
                }
            }
            None => {
                self.sparse.remove(&(a, b));
            }
        }
    }
}
