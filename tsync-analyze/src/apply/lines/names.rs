//! The member names a scan looks for, prepared once so that telling a key apart from them is a
//! few integer comparisons: a line's keys are compared with every name asked for, and calling
//! `memcmp` for each pair was a fifth of the scanner's work.

/// The first (up to) eight bytes of `s[at..at + len]` as a little-endian word, zero-padded.
#[inline(always)]
fn head(s: &[u8], at: usize, len: usize) -> u64 {
    let n = len.min(8);
    if at + 8 <= s.len() {
        let w = u64::from_le_bytes(s[at..at + 8].try_into().expect("eight bytes"));
        if n == 8 {
            w
        } else {
            w & ((1u64 << (8 * n)) - 1)
        }
    } else {
        let mut b = [0u8; 8];
        b[..n].copy_from_slice(&s[at..at + n]);
        u64::from_le_bytes(b)
    }
}

/// `N` member names (their text, unescaped), with what a key is first compared against.
#[derive(Clone, Debug)]
pub struct Names<const N: usize> {
    names: [Vec<u8>; N],
    heads: [u64; N],
    /// Per key length (63: 63 or more), the names of that length as a bit set: most keys have
    /// none and are passed over at once, the others are compared with one or two names.
    by_len: [u64; 64],
}

impl<const N: usize> Names<N> {
    /// Prepares `names` (at most 64).
    pub fn new(names: [&[u8]; N]) -> Self {
        assert!(N <= 64, "at most 64 names");
        let mut by_len = [0u64; 64];
        for (k, n) in names.iter().enumerate() {
            by_len[n.len().min(63)] |= 1 << k;
        }
        Names {
            names: names.map(<[u8]>::to_vec),
            heads: names.map(|n| head(n, 0, n.len())),
            by_len,
        }
    }

    /// The `k`th name.
    pub fn name(&self, k: usize) -> &[u8] {
        &self.names[k]
    }

    /// Which name (the first, by index) the key `s[k0..k1]` is; `escaped`: the key holds a
    /// backslash and is decoded first (rare).
    #[inline(always)]
    pub(super) fn find(&self, s: &[u8], (k0, k1): (usize, usize), escaped: bool) -> Option<usize> {
        if escaped {
            let key = serde_json::from_slice::<String>(&s[k0 - 1..k1 + 1]).ok()?;
            return self.names.iter().position(|n| n == key.as_bytes());
        }
        let len = k1 - k0;
        let mut candidates = self.by_len[len.min(63)];
        if candidates == 0 {
            return None;
        }
        let h = head(s, k0, len);
        while candidates != 0 {
            let k = candidates.trailing_zeros() as usize;
            candidates &= candidates - 1;
            let name = &self.names[k];
            if self.heads[k] == h && name.len() == len && (len <= 8 || s[k0 + 8..k1] == name[8..]) {
                return Some(k);
            }
        }
        None
    }
}
