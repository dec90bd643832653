//! Coarse alignment of the nodes' realtime clocks, before matching trace files.
//!
//! Matching merges the traces on CLOCK_REALTIME and waits one window (2 s by default) for each
//! packet's partner. That holds while the nodes' realtime clocks agree to well under the window,
//! as NTP keeps them. Nodes without NTP do not: a board without a battery-backed clock boots in
//! 1970, a VM restored from a snapshot resumes hours late. Then no send finds its receive within
//! the window and every pair would come out `absent`.
//!
//! So before matching, a sample of each file's first events is joined on the packet key, ignoring
//! time altogether, and each pair's realtime disagreement is estimated from the matched samples
//! (half the difference of the median apparent delays of the two directions, so that the delays
//! cancel; the median ignores the few keys that pair wrongly). Corrections are composed along a
//! spanning tree of the best-sampled pairs. They move the merge axis only: the estimate never
//! sees them, and they are applied only when some node is off by more than [`THRESHOLD_NS`].
//!
//! The sample is read from a copy of each file, opened for it, and decoded again by the matching
//! pass. Keeping the chunks it decoded for the pass instead (as the analyzer did for a while)
//! saves decoding the sample twice, some 15 % of `sync`'s instructions on 16 traces of 3·10^5
//! messages, but holds the whole sample (2^18 events of 88 bytes: 22 MiB) in memory written
//! once: its first writes page-fault (5,500 faults, ~2 µs each on a VM), evict the caches the
//! pass then works in, and doubled the analyzer's peak memory. Decoding is cheaper than that:
//! measured in alternating runs, `sync` takes as long or less without keeping (2 % to 17 % less
//! with two threads on 2 and 16 traces), in half the memory (docs/benchmarks.md).

use std::cmp::Reverse;
use std::collections::BTreeMap;
use std::path::Path;

use rustc_hash::FxHashMap;

use tsync_common::{PacketEvent, direction};

use crate::input::tracefile::{TraceFile, usable};
use crate::matching::merge::hash_keys;

/// Events read from the start of the files, all together (split evenly, at least
/// [`MIN_EVENTS_PER_FILE`] each): 20 MiB, a few percent of a large analysis. Two nodes
/// exchanging 10 000 packets/s each way overlap in these if their agents started within 6 s.
const EVENT_BUDGET: u64 = 1 << 18;
const MIN_EVENTS_PER_FILE: u64 = 1 << 14;
/// One key in 2^SAMPLE_BITS is kept (by hash, so that both ends of a packet are kept or neither):
/// some 2^16 keys, a few MiB.
const SAMPLE_BITS: u32 = 2;
/// Matched samples a direction needs to be trusted.
const MIN_SAMPLES: usize = 8;
/// Disagreements below this are left to the window (and left alone, so that well-synchronized
/// nodes are merged exactly as their clocks say).
pub const THRESHOLD_NS: i64 = 20_000_000;

/// One file to sample.
pub(crate) struct SampleInput<'a> {
    /// The file: the sample is read from a copy of it, opened here.
    pub path: &'a Path,
    /// The node's name, for the warnings.
    pub name: String,
}

/// The first event seen of a sampled key on one side.
#[derive(Clone, Copy)]
struct Side {
    file: u32,
    aligned: i64,
    count: u32,
}

/// Per-file corrections (ns, added to the merge axis) and what to tell the user.
pub(crate) struct Alignment {
    pub corrections_ns: Vec<i64>,
    pub warnings: Vec<String>,
}

/// Estimates the corrections for `files`, on the merge axis the matcher uses, reading up to
/// `threads` files at once.
pub(crate) fn estimate(files: &[SampleInput<'_>], threads: usize) -> Alignment {
    let n = files.len();
    let none = Alignment {
        corrections_ns: vec![0; n],
        warnings: Vec::new(),
    };
    if n < 2 {
        return none;
    }
    let per_file = (EVENT_BUDGET / n as u64).max(MIN_EVENTS_PER_FILE);
    let mut sends = Keys::default();
    let mut recvs = Keys::default();
    // Files are read in waves of `threads` (decoding is most of the cost) and their samples
    // joined in file order, as one thread reading them in turn would: what each key keeps is
    // its first file's first event, and its count over all files. Each reading thread fills
    // the same tables file after file, emptied by the join (the first file's are taken whole):
    // tables sized for a file's whole sample are scattered over hundreds of pages, and fresh
    // ones for every file page-faulted more than the sample's decoding cost on 16 small files.
    let threads = threads.clamp(1, n);
    let mut samples: Vec<FileSample> = (0..threads).map(|_| FileSample::default()).collect();
    let mut k = 0u32;
    for wave in files.chunks(threads) {
        let samples = &mut samples[..wave.len()];
        if let [one] = samples {
            sample(&wave[0], k, per_file, one);
        } else {
            std::thread::scope(|scope| {
                let reading: Vec<_> = (k..)
                    .zip(wave)
                    .zip(samples.iter_mut())
                    .map(|((k, f), out)| scope.spawn(move || sample(f, k, per_file, out)))
                    .collect();
                for r in reading {
                    r.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
                }
            });
        }
        for s in samples {
            join(&mut sends, &mut s.sends);
            join(&mut recvs, &mut s.recvs);
        }
        k += wave.len() as u32;
    }
    let (corrections, root) = tree(n, &pair_offsets(&sends, &recvs));
    let worst = corrections.iter().map(|c| c.abs()).max().unwrap_or(0);
    if worst < THRESHOLD_NS {
        return none;
    }
    let warnings = (0..n)
        .filter(|&k| corrections[k].abs() >= THRESHOLD_NS)
        .map(|k| {
            let r = root[k];
            format!(
                "{}: its realtime clock is about {:.3} s {} {}'s (estimated from the packets both \
                 recorded); the traces were aligned for matching only",
                files[k].name,
                corrections[k].unsigned_abs() as f64 / 1e9,
                if corrections[k] < 0 {
                    "ahead of"
                } else {
                    "behind"
                },
                files[r].name,
            )
        })
        .collect();
    Alignment {
        corrections_ns: corrections,
        warnings,
    }
}

/// Sampled keys and the first event seen of each on one side. The keys are hashes already: Fx
/// costs a multiply, SipHash ten times more (this runs for every sampled event).
type Keys = FxHashMap<u64, Side>;

/// The sampled keys of one file.
#[derive(Default)]
struct FileSample {
    sends: Keys,
    recvs: Keys,
}

/// Samples the first `per_file` events (whole chunks) of file number `k` into `out` (empty), from
/// a copy of the file opened here. A copy the sampler cannot open or read is left to the matching
/// pass, which reports it.
fn sample(f: &SampleInput<'_>, k: u32, per_file: u64, out: &mut FileSample) {
    if out.sends.capacity() == 0 {
        *out = FileSample::with_capacity((per_file >> SAMPLE_BITS) as usize);
    }
    let Ok(mut file) = TraceFile::open(f.path) else {
        return;
    };
    let mut shift = file.start_shift();
    let mut hashes = Vec::new();
    let mut taken = 0u64;
    while taken < per_file && matches!(file.next_chunk(), Ok(Some(_))) {
        shift = file.latest_shift(shift);
        let events = file.events();
        hashes.clear();
        hash_keys(events, &mut hashes);
        taken += events.len() as u64;
        out.add(k, events, &hashes, shift);
    }
}

impl FileSample {
    /// Tables sized for `keys` sampled keys a side, the most a file's sample can hold (one key
    /// in 2^[`SAMPLE_BITS`] of its events): no table grows, and rehashes, while it is filled.
    fn with_capacity(keys: usize) -> Self {
        FileSample {
            sends: Keys::with_capacity_and_hasher(keys, Default::default()),
            recvs: Keys::with_capacity_and_hasher(keys, Default::default()),
        }
    }

    /// Adds the sampled keys of a chunk of file `k` (`hashes`: its events' key hashes, `shift`:
    /// its realtime shift).
    fn add(&mut self, k: u32, events: &[PacketEvent], hashes: &[u64], shift: i64) {
        for (e, &h) in events.iter().zip(hashes) {
            if h >> (64 - SAMPLE_BITS) != 0 || !usable(e) {
                continue;
            }
            let table = match e.direction {
                direction::SEND => &mut self.sends,
                direction::RECV => &mut self.recvs,
                _ => continue,
            };
            let aligned = (e.ts_ns as i64).saturating_add(shift);
            table.entry(h).and_modify(|s| s.count += 1).or_insert(Side {
                file: k,
                aligned,
                count: 1,
            });
        }
    }
}

/// Moves a later file's sampled keys to `all` (`later` is left empty: with its room, or without
/// any when `all` was empty and took its table): a key seen before keeps its first event.
fn join(all: &mut Keys, later: &mut Keys) {
    if all.is_empty() {
        std::mem::swap(all, later);
        return;
    }
    all.reserve(later.len());
    for (h, side) in later.drain() {
        all.entry(h)
            .and_modify(|s| s.count += side.count)
            .or_insert(side);
    }
}

/// For each pair of files (a < b) with enough matched samples: how far b's merge axis is ahead of
/// a's (ns), and how many samples say so. In a map ordered by pair, so that the spanning tree
/// built from it does not depend on a hasher's order.
fn pair_offsets(sends: &Keys, recvs: &Keys) -> BTreeMap<(u32, u32), (i64, usize)> {
    // Apparent delays per ordered pair (sender, receiver); Fx as for the keys (one insertion
    // per matched sample). A median does not depend on the order of its samples.
    let mut delays: FxHashMap<(u32, u32), Vec<i64>> = FxHashMap::default();
    for (h, s) in sends {
        if let Some(r) = recvs.get(h)
            && s.count == 1
            && r.count == 1
            && s.file != r.file
        {
            delays
                .entry((s.file, r.file))
                .or_default()
                .push(r.aligned.saturating_sub(s.aligned));
        }
    }
    let mut medians: BTreeMap<(u32, u32), (i64, usize)> = BTreeMap::new();
    for (pair, mut d) in delays {
        if d.len() >= MIN_SAMPLES {
            let mid = d.len() / 2;
            let (_, m, _) = d.select_nth_unstable(mid);
            medians.insert(pair, (*m, d.len()));
        }
    }
    let mut offsets = BTreeMap::new();
    for (&(a, b), &(ab, n_ab)) in &medians {
        if a > b && medians.contains_key(&(b, a)) {
            continue; // handled from the other direction
        }
        let (lo, hi) = (a.min(b), a.max(b));
        // ab = delay + (b ahead of a); ba = delay − (b ahead of a).
        let (ahead, count) = match medians.get(&(b, a)) {
            Some(&(ba, n_ba)) => (ab / 2 - ba / 2, n_ab + n_ba),
            None => (ab, n_ab), // one direction: off by one delay, far below a window
        };
        let ahead = if a == lo { ahead } else { -ahead };
        offsets.insert((lo, hi), (ahead, count));
    }
    offsets
}

/// Maximum spanning forest by sample count; each tree's root (its lowest file) keeps its axis.
/// Of edges with equal counts, the one with the lowest files is taken: the same every run.
fn tree(n: usize, offsets: &BTreeMap<(u32, u32), (i64, usize)>) -> (Vec<i64>, Vec<usize>) {
    let mut correction = vec![0i64; n];
    let mut root = vec![usize::MAX; n];
    for start in 0..n {
        if root[start] != usize::MAX {
            continue;
        }
        root[start] = start;
        loop {
            // The best-sampled edge from the tree to a file outside any tree.
            let best = offsets
                .iter()
                .filter_map(|(&(a, b), &(ahead, count))| {
                    let (a, b) = (a as usize, b as usize);
                    match (root[a] == start, root[b] == start) {
                        (true, false) if root[b] == usize::MAX => Some((count, a, b, ahead)),
                        (false, true) if root[a] == usize::MAX => Some((count, b, a, -ahead)),
                        _ => None,
                    }
                })
                .max_by_key(|&(count, inside, outside, _)| {
                    (
                        count,
                        Reverse(inside.min(outside)),
                        Reverse(inside.max(outside)),
                    )
                });
            let Some((_, inside, outside, ahead)) = best else {
                break;
            };
            // outside's axis is `ahead` ahead of inside's: subtract it.
            correction[outside] = correction[inside] - ahead;
            root[outside] = start;
        }
    }
    (correction, root)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn side(file: u32, aligned: i64) -> Side {
        Side {
            file,
            aligned,
            count: 1,
        }
    }

    #[test]
    fn offsets_cancel_the_delays_and_compose_along_a_chain() {
        // File 1 is 10 s ahead of file 0, file 2 is 3 s behind file 1; delays 100 µs and 300 µs.
        let mut sends = Keys::default();
        let mut recvs = Keys::default();
        let mut h = 0u64;
        for i in 0..50i64 {
            let t = i * 1_000_000;
            for (s, r, ahead, delay) in [
                (0, 1, 10_000_000_000, 100_000),
                (1, 0, -10_000_000_000, 300_000),
                (1, 2, -3_000_000_000, 100_000),
                (2, 1, 3_000_000_000, 300_000),
            ] {
                h += 1;
                sends.insert(h, side(s, t));
                recvs.insert(h, side(r, t + delay + ahead));
            }
        }
        let offsets = pair_offsets(&sends, &recvs);
        // Off by half the delay asymmetry (100 µs), as any two-way estimate.
        assert_eq!(offsets[&(0, 1)], (10_000_000_000 - 100_000, 100));
        assert_eq!(offsets[&(1, 2)], (-3_000_000_000 - 100_000, 100));
        assert!(!offsets.contains_key(&(0, 2)));
        let (c, root) = tree(3, &offsets);
        assert_eq!(c, vec![0, -9_999_900_000, -6_999_800_000]);
        assert_eq!(root, vec![0, 0, 0]);
    }

    #[test]
    fn duplicates_same_file_and_thin_pairs_are_ignored() {
        let mut sends = Keys::default();
        let mut recvs = Keys::default();
        for h in 0..(MIN_SAMPLES as u64 - 1) {
            sends.insert(h, side(0, 0));
            recvs.insert(h, side(1, 5_000_000_000));
        }
        // A retransmitted key and a loopback key say nothing.
        sends.insert(
            100,
            Side {
                count: 2,
                ..side(0, 0)
            },
        );
        recvs.insert(100, side(1, 5_000_000_000));
        sends.insert(101, side(1, 0));
        recvs.insert(101, side(1, 0));
        assert!(pair_offsets(&sends, &recvs).is_empty());
        assert_eq!(tree(2, &BTreeMap::new()), (vec![0, 0], vec![0, 1]));
    }

    /// Pairs that disagree (0→1 and 1→2 do not add up to 0→2) with equal sample counts: the
    /// tree takes the edges of the lowest files, whatever order the pairs came in, so two runs
    /// on the same files align them alike.
    #[test]
    fn ties_between_edges_are_broken_by_file_not_by_order() {
        let offsets: BTreeMap<(u32, u32), (i64, usize)> =
            [((1, 2), (11, 50)), ((0, 2), (20, 50)), ((0, 1), (10, 50))]
                .into_iter()
                .collect();
        assert_eq!(tree(3, &offsets), (vec![0, -10, -20], vec![0, 0, 0]));
    }
}
