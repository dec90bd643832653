//! The address watcher: a thread of its own that scans the node's network namespaces every
//! [`SCAN_PERIOD`] and hands an [`AddressTable`] to the recording loop at the start and whenever
//! the table changed (a pod started or stopped, an address was added or removed).
//!
//! Why a thread: a scan reads a link per process in `/proc` and two files per namespace
//! (milliseconds on a node with thousands of processes), and the recording loop must not wait
//! for it; the clock sampler's thread runs at real-time priority and must not either. The loop
//! picks the tables up at its flushes, as it does the clock records.
use std::{
    collections::BTreeSet,
    sync::mpsc::{self, Receiver, RecvTimeoutError, Sender},
    thread::{self, JoinHandle},
    time::{Duration, Instant},
};

use tsync_common::format::{AddressTable, ClockSkew, NamespaceAddresses};

use super::{Selection, scan};
use crate::clock;

/// Period of scans: pods live for seconds at the least, and a scan costs milliseconds.
pub const SCAN_PERIOD: Duration = Duration::from_secs(2);

/// The running watcher. Dropping it stops the thread.
pub struct Watcher {
    tables: Receiver<AddressTable>,
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Watcher {
    /// Starts the thread; it scans at once, so that the first table comes before any event.
    pub fn start(
        selection: Selection,
        skew: Option<ClockSkew>,
        period: Duration,
    ) -> std::io::Result<Watcher> {
        let (tables_tx, tables) = mpsc::channel();
        let (stop, stop_rx) = mpsc::channel();
        let thread = thread::Builder::new()
            .name("tsync-addresses".into())
            .spawn(move || run(&selection, skew, period, &tables_tx, &stop_rx))?;
        Ok(Watcher {
            tables,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// The tables scanned since the last call.
    pub fn take(&self) -> impl Iterator<Item = AddressTable> + '_ {
        self.tables.try_iter()
    }

    /// Stops the thread and returns the tables it left.
    pub fn stop(mut self) -> Vec<AddressTable> {
        self.halt();
        self.tables.try_iter().collect()
    }

    fn halt(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take()
            && thread.join().is_err()
        {
            log::warn!("the address watcher thread panicked");
        }
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.halt();
    }
}

/// The thread: scan, send the table if it changed, sleep until the next period or until told to
/// stop (the stop channel's sender is dropped).
fn run(
    selection: &Selection,
    skew: Option<ClockSkew>,
    period: Duration,
    out: &Sender<AddressTable>,
    stop: &Receiver<()>,
) {
    let mut last: Option<Vec<NamespaceAddresses>> = None;
    let mut unreadable = BTreeSet::new();
    loop {
        let started = Instant::now();
        let table = table(selection, skew.as_ref(), &mut unreadable);
        log::debug!(
            "address scan: {} network namespace(s) in {:.2} ms",
            table.namespaces.len(),
            started.elapsed().as_secs_f64() * 1e3
        );
        if last.as_ref() != Some(&table.namespaces) {
            last = Some(table.namespaces.clone());
            if out.send(table).is_err() {
                return;
            }
        }
        match stop.recv_timeout(period) {
            Err(RecvTimeoutError::Timeout) => {}
            Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
        }
    }
}

/// One scan: every namespace the agent sees, with its addresses. A namespace whose addresses
/// cannot be read (gone since the scan found it; or, without a process in it, not enterable
/// without CAP_SYS_ADMIN) is left out, and said so once in the log (`unreadable` remembers).
fn table(
    selection: &Selection,
    skew: Option<&ClockSkew>,
    unreadable: &mut BTreeSet<u64>,
) -> AddressTable {
    let now = clock::monotonic_ns();
    let namespaces = scan()
        .into_iter()
        .filter_map(|ns| match ns.addresses() {
            Ok(addresses) => Some(NamespaceAddresses {
                inode: ns.inode,
                recorded: selection.records(ns.inode),
                addresses,
            }),
            Err(e) => {
                if unreadable.insert(ns.inode) {
                    let recorded = selection.records(ns.inode);
                    let text = format!(
                        "cannot read the addresses of network namespace {} ({}): {e}",
                        ns.inode,
                        ns.path().display()
                    );
                    if recorded {
                        log::warn!("{text}");
                    } else {
                        log::debug!("{text}");
                    }
                }
                None
            }
        })
        .collect();
    AddressTable {
        monotonic_ns: skew.map_or(now, |s| s.apply(now)),
        namespaces,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node;

    #[test]
    fn the_first_table_lists_the_agents_namespace_as_recorded() {
        let own = node::netns_inode().unwrap();
        let selection = Selection::Only(vec![tsync_common::format::RecordedNetns {
            inode: own,
            path: super::super::OWN.into(),
        }]);
        let watcher = Watcher::start(selection, None, Duration::from_secs(3600)).unwrap();
        let tables = watcher.stop();
        assert_eq!(tables.len(), 1, "one scan before the stop");
        let ns = &tables[0].namespaces;
        assert!(ns.iter().any(|n| n.inode == own && n.recorded), "{ns:?}");
        assert!(ns.iter().filter(|n| n.recorded).count() == 1, "{ns:?}");
        assert!(tables[0].monotonic_ns > 0);
    }
}
