//! One timeline from many nodes: the applied logs (or traces) of several nodes merged by their
//! corrected time, each record told whether its place is guaranteed.
//!
//! **Streaming.** A k-way merge: each file is read record by record (parsed on a thread of its
//! own: [`threaded`]), a binary heap picks the earliest head, and memory holds one reorder window
//! per file whatever the files' length.
//! Every file must be in time order but for local disorder (a multi-threaded logger stamps before
//! it takes its lock): each file keeps up to `window` records ahead in its own heap, so a record
//! may come up to `window` records late in its file; one later than that is an error naming
//! `file:line` (sort the file, or raise the window).
//!
//! **Which orders are certain.** `apply --interval` writes each time's guaranteed interval
//! `[lo, hi]`: the true time lies in it. A record `r` of one file is `certain` when every record
//! of another file merged before it, of those with an interval, ends before `r`'s begins:
//! `hi(p) < lo(r)` for all of them (strictly: two intervals that share an end point leave room
//! for the same instant, a tie no order can be read from). Then `r` truly happened after every one
//! of them. Otherwise it is `uncertain`: some earlier record of another node may truly have
//! happened after it. A record without an interval is `unknown`, and takes no part in the others'
//! verdicts (nothing bounds its true time). Records of the same file are not compared: one
//! node's clock orders its own events. So a merged timeline whose records are all `certain` is the
//! true order of every pair of events of different nodes.

pub mod chrome;
pub mod csv;
pub mod jsonl;
pub mod threaded;

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

/// Records a file may come late by, by default (see the module doc).
pub const DEFAULT_WINDOW: usize = 4096;

/// The member (JSON) or column (CSV) `merge` adds to each record.
pub const ORDER_FIELD: &str = "tsync_order";

/// Why a merge failed.
#[derive(thiserror::Error, Debug)]
pub enum MergeError {
    /// An input is not what its format says, or not in order (the message names file:line).
    #[error("{0}")]
    Input(String),
    /// Reading an input or writing the result failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being read or written.
        what: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

impl MergeError {
    pub(crate) fn io(what: impl std::fmt::Display, source: std::io::Error) -> Self {
        MergeError::Io {
            what: what.to_string(),
            source,
        }
    }
}

/// What the merge says of a record's place among the other nodes' records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Order {
    /// After every earlier record of another node (with an interval), guaranteed.
    Certain,
    /// Some earlier record of another node may truly come after it.
    Uncertain,
    /// The record has no interval.
    Unknown,
}

impl Order {
    /// The word written into the record.
    pub fn as_str(self) -> &'static str {
        match self {
            Order::Certain => "certain",
            Order::Uncertain => "uncertain",
            Order::Unknown => "unknown",
        }
    }
}

/// A record as a source gives it.
pub enum Next<T> {
    /// A record with its corrected time (ns), its interval, and its line in the file.
    Timed {
        /// The merge key: the corrected time, ns.
        t: i64,
        /// The guaranteed interval, if the record carries one.
        interval: Option<(i64, i64)>,
        /// Where the record starts in its file (1-based), for errors.
        line: u64,
        /// The record itself.
        item: T,
    },
    /// A record without a time (Chrome metadata events): kept at its place in its file.
    Untimed(T),
    /// The file is done.
    End,
}

/// A file's records, in file order.
pub trait Source {
    /// One record, as the sink writes it.
    type Item;
    /// The next record.
    fn next(&mut self) -> Result<Next<Self::Item>, MergeError>;
    /// The file's name, for messages.
    fn name(&self) -> &str;
    /// Takes back a record once it is written, to reuse its memory (allocating and freeing a
    /// buffer per record, on two threads, is a good part of a merge's cost otherwise).
    fn recycle(&mut self, _item: Self::Item) {}
}

/// Where the merged records go.
pub trait Sink<T> {
    /// Writes a timed record with its verdict (the record may be changed on the way).
    fn record(&mut self, item: &mut T, order: Order) -> Result<(), MergeError>;
    /// Writes an untimed record as it was.
    fn untimed(&mut self, item: &mut T) -> Result<(), MergeError>;
}

/// What a merge did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MergeSummary {
    /// Timed records per input file.
    pub records: Vec<u64>,
    /// Verdicts.
    pub certain: u64,
    /// Verdicts.
    pub uncertain: u64,
    /// Records without an interval.
    pub unknown: u64,
    /// Records without a time (Chrome metadata), written at their place.
    pub untimed: u64,
    /// Records that came later in their file than a record with a later time (put in place).
    pub reordered: u64,
}

/// A record waiting in its file's reorder window, ordered by (time, position in the file).
struct Pending<T> {
    t: i64,
    seq: u64,
    interval: Option<(i64, i64)>,
    line: u64,
    timed: bool,
    item: T,
}

impl<T> Pending<T> {
    fn key(&self) -> (i64, u64) {
        (self.t, self.seq)
    }
}

/// One input: its source, its reorder window, and where its output stands.
struct Lane<S: Source> {
    source: S,
    /// The records read ahead, in (time, position) order: a record in order goes to the back
    /// in O(1); a late one is inserted at its place (rare, and within the window).
    window: VecDeque<Pending<S::Item>>,
    seq: u64,
    done: bool,
    /// The latest time read from the file (untimed records take it).
    latest: i64,
    /// Time and line of the last record written from this file.
    written: Option<(i64, u64)>,
    /// The largest interval end among this file's records written so far.
    max_hi: Option<i64>,
}

impl<S: Source> Lane<S> {
    /// Reads until `size` records wait (or the file ends).
    fn fill(&mut self, size: usize, summary: &mut MergeSummary) -> Result<(), MergeError> {
        while !self.done && self.window.len() < size {
            let p = match self.source.next()? {
                Next::End => {
                    self.done = true;
                    break;
                }
                Next::Timed {
                    t,
                    interval,
                    line,
                    item,
                } => {
                    summary.reordered += u64::from(t < self.latest);
                    self.latest = self.latest.max(t);
                    Pending {
                        t,
                        seq: self.seq,
                        interval,
                        line,
                        timed: true,
                        item,
                    }
                }
                Next::Untimed(item) => Pending {
                    t: self.latest,
                    seq: self.seq,
                    interval: None,
                    line: 0,
                    timed: false,
                    item,
                },
            };
            self.seq += 1;
            if self.window.back().is_none_or(|b| b.key() <= p.key()) {
                self.window.push_back(p);
            } else {
                let at = self.window.partition_point(|q| q.key() <= p.key());
                self.window.insert(at, p);
            }
        }
        Ok(())
    }

    fn head(&self) -> Option<(i64, u64)> {
        self.window.front().map(Pending::key)
    }
}

/// Merges `sources` into `sink` by time (ties: the earlier file, then file order), each timed
/// record with its [`Order`]; `window` is how many records a file may come late by.
pub fn merge<S: Source, K: Sink<S::Item>>(
    sources: Vec<S>,
    sink: &mut K,
    window: usize,
) -> Result<MergeSummary, MergeError> {
    let size = window + 1;
    let mut summary = MergeSummary {
        records: vec![0; sources.len()],
        ..Default::default()
    };
    let mut lanes: Vec<Lane<S>> = sources
        .into_iter()
        .map(|source| Lane {
            source,
            window: VecDeque::with_capacity(size.min(1 << 16)),
            seq: 0,
            done: false,
            latest: i64::MIN,
            written: None,
            max_hi: None,
        })
        .collect();
    // The heads of the lanes: (time, lane, position in its file).
    let mut heads = BinaryHeap::with_capacity(lanes.len());
    for (k, lane) in lanes.iter_mut().enumerate() {
        lane.fill(size, &mut summary)?;
        if let Some((t, seq)) = lane.head() {
            heads.push(Reverse((t, k, seq)));
        }
    }
    // The two largest interval ends over the lanes, (end, lane): the largest among the *other*
    // lanes is one of them.
    let mut top: [Option<(i64, usize)>; 2] = [None, None];
    while let Some(Reverse((_, k, _))) = heads.pop() {
        let lane = &mut lanes[k];
        let mut p = lane.window.pop_front().expect("a head is a waiting record");
        if !p.timed {
            summary.untimed += 1;
            sink.untimed(&mut p.item)?;
        } else {
            if let Some((t0, line0)) = lane.written
                && p.t < t0
            {
                return Err(MergeError::Input(format!(
                    "{}:{}: the time {} comes before {} (line {line0}), which was written \
                     already: the file is out of order by more than the reorder window \
                     ({window} records); sort it by time first, or raise --window",
                    lane.source.name(),
                    p.line,
                    p.t,
                    t0
                )));
            }
            lane.written = Some((p.t, p.line));
            summary.records[k] += 1;
            let order = match p.interval {
                None => Order::Unknown,
                Some((lo, hi)) => {
                    let others = top.iter().flatten().find(|(_, j)| *j != k).map(|x| x.0);
                    let order = if others.is_none_or(|h| h < lo) {
                        Order::Certain
                    } else {
                        Order::Uncertain
                    };
                    if lane.max_hi.is_none_or(|m| hi > m) {
                        lane.max_hi = Some(hi);
                        raise(&mut top, k, hi);
                    }
                    order
                }
            };
            match order {
                Order::Certain => summary.certain += 1,
                Order::Uncertain => summary.uncertain += 1,
                Order::Unknown => summary.unknown += 1,
            }
            sink.record(&mut p.item, order)?;
        }
        let lane = &mut lanes[k];
        lane.source.recycle(p.item);
        lane.fill(size, &mut summary)?;
        if let Some((t, seq)) = lane.head() {
            heads.push(Reverse((t, k, seq)));
        }
    }
    Ok(summary)
}

/// Keeps `top` the two lanes with the largest interval ends when lane `k`'s grows to `hi` (ends
/// only grow, so a lane leaves the two only when overtaken).
fn raise(top: &mut [Option<(i64, usize)>; 2], k: usize, hi: i64) {
    match *top {
        [Some((_, a)), _] if a == k => top[0] = Some((hi, k)),
        [first, Some((_, b))] if b == k => {
            top[1] = Some((hi, k));
            if first.is_none_or(|(t, _)| hi > t) {
                top.swap(0, 1);
            }
        }
        [first, second] => {
            if first.is_none_or(|(t, _)| hi > t) {
                *top = [Some((hi, k)), first];
            } else if second.is_none_or(|(t, _)| hi > t) {
                top[1] = Some((hi, k));
            }
        }
    }
}

#[cfg(test)]
mod tests;
