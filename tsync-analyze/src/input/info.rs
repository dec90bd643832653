//! `tsync-analyze info`: what a trace file holds, read in one streaming pass.
//!
//! A user collecting files from many nodes first wants to know whether each recording is whole:
//! which node, how many events, how many the kernel lost, whether the file was cut short, and how
//! the node's clocks behaved (NTP slewing shows as a CLOCK_MONOTONIC vs CLOCK_MONOTONIC_RAW rate,
//! the kernel's clock discipline as its adjtimex states, and how much slewing the analyzer
//! undoes as the [`SlewSummary`]).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde::Serialize;
use tsync_common::format::{
    AddressTable, ClockSample, Header, HeldAddress, KernelClock, LostCounts, RecordedNetns,
    held_addresses, read_address_tables,
};

use crate::input::InputError;
use crate::input::slew::{SlewCorrection, SlewSummary};
use crate::input::tracefile::TraceFile;
use tsync_common::{PacketEvent, direction, flag, kind};

use crate::input::passages::Passages;

/// Everything `info` reports about one file.
#[derive(Serialize, Debug, Clone)]
pub struct TraceSummary {
    /// The file, as given.
    pub path: PathBuf,
    /// The file's header: node, boot, clocksource, interfaces and agent options.
    pub header: Header,
    /// Format version of the file (1 to 3).
    pub format_version: u32,
    /// What the file takes on disk, per event and against raw records.
    pub size: SizeSummary,
    /// Events read, by direction and kind.
    pub events: EventCounts,
    /// Lost-event counters (the footer's, or the last ones written before a cut): in the kernel
    /// and, from version 3 on, on the way to disk.
    pub lost: LostCounts,
    /// First and last event time (ns, as written: after `--clock-skew`).
    pub first_ns: Option<u64>,
    /// Last event time in the file (ns, as written); None when the file has no events.
    pub last_ns: Option<u64>,
    /// What the node's clock samples say about its clocks.
    pub clock: ClockSummary,
    /// The network namespaces recorded, and the addresses the node held (format version 5 on).
    pub namespaces: NamespaceSummary,
    /// True when the file ends with its end chunk.
    pub complete: bool,
    /// What could not be read, if anything.
    pub damage: Option<DamageInfo>,
}

/// Event counts by direction and kind.
#[derive(Serialize, Debug, Clone, Default, PartialEq, Eq)]
pub struct EventCounts {
    /// All events read.
    pub total: u64,
    /// Events seen by the send hook (`net_dev_queue`).
    pub send: u64,
    /// Events seen by the receive hook (`netif_receive_skb`).
    pub recv: u64,
    /// IPv4 + TCP events.
    pub tcp4: u64,
    /// IPv6 + TCP events.
    pub tcp6: u64,
    /// IPv4 + UDP events (any kind that is not TCP or UDP/IPv6 is counted here).
    pub udp4: u64,
    /// IPv6 + UDP events (format version 5 on).
    pub udp6: u64,
    /// Events of a tunnel's outer packets, digested by the packet inside (VXLAN, Geneve; format
    /// version 5 on).
    pub encapsulated: u64,
    /// Packets the node received and sent on within 1 ms (routed, bridged, NAT'ed or tunnelled
    /// between its pods and the wire): the matcher follows them from node to node.
    pub forwarded: u64,
    /// Events whose time is earlier than the event before them in the file.
    pub out_of_order: u64,
}

/// What a file takes on disk.
#[derive(Serialize, Debug, Clone, Default, PartialEq)]
pub struct SizeSummary {
    /// Size of the file in bytes.
    pub bytes: u64,
    /// Bytes on disk per event (clock samples and metadata included); None without events.
    pub bytes_per_event: Option<f64>,
    /// How many times smaller the file is than its events as raw 80-byte records (version 3
    /// compresses them; version 1 and 2 files come out just below 1); None without events.
    pub compression_ratio: Option<f64>,
}

impl SizeSummary {
    fn new(bytes: u64, events: u64) -> Self {
        let per_event = (events > 0).then(|| bytes as f64 / events as f64);
        SizeSummary {
            bytes,
            bytes_per_event: per_event,
            compression_ratio: per_event.map(|b| tsync_common::EVENT_SIZE as f64 / b),
        }
    }

    /// The `size` line of `info`.
    pub fn describe(&self) -> String {
        let mut text = format!("{} bytes", self.bytes);
        if let (Some(per_event), Some(ratio)) = (self.bytes_per_event, self.compression_ratio) {
            text.push_str(&format!(
                ", {per_event:.2} bytes per event ({ratio:.1}× smaller than {}-byte records)",
                tsync_common::EVENT_SIZE
            ));
        }
        text
    }
}

/// Which network namespaces a trace recorded, and which addresses the node held in all the
/// namespaces its agent saw (pods included): what tells the analyzer which packets the node
/// sent or received rather than forwarded.
#[derive(Serialize, Debug, Clone, Default, PartialEq)]
pub struct NamespaceSummary {
    /// Every namespace was recorded (`--all-netns`).
    pub all_netns: bool,
    /// The namespaces recorded, when not all: the agent's own, or those of `--netns` (for files
    /// before version 5, the agent's own when the header names it).
    pub recorded: Vec<RecordedNetns>,
    /// Address tables in the file: one at the start, one per change (0 before version 5).
    pub address_tables: usize,
    /// Distinct addresses the node held over the recording, in any namespace.
    pub addresses: usize,
    /// Namespaces that held at least one of them.
    pub namespaces: usize,
    /// Of the addresses, those held in recorded namespaces.
    pub recorded_addresses: usize,
    /// Each address with its namespace and the interval it was held in (see
    /// `tsync_common::format::held_addresses`).
    pub held: Vec<HeldAddress>,
}

impl NamespaceSummary {
    fn new(header: &Header, tables: &[AddressTable]) -> Self {
        let held = held_addresses(tables);
        let distinct = |pick: &dyn Fn(&HeldAddress) -> bool| {
            held.iter()
                .filter(|h| pick(h))
                .map(|h| h.address.ip)
                .collect::<BTreeSet<_>>()
                .len()
        };
        NamespaceSummary {
            all_netns: header.options.all_netns,
            recorded: header.options.recorded_netns.clone(),
            address_tables: tables.len(),
            addresses: distinct(&|_| true),
            namespaces: held
                .iter()
                .map(|h| h.netns_inode)
                .collect::<BTreeSet<_>>()
                .len(),
            recorded_addresses: distinct(&|h| h.recorded),
            held,
        }
    }

    /// The `namespaces` and `addresses` lines of `info`.
    pub fn lines(&self, format_version: u32) -> Vec<(&'static str, String)> {
        let recorded = if self.all_netns {
            "all (--all-netns)".to_owned()
        } else if self.recorded.is_empty() {
            "not named in the header".to_owned()
        } else {
            self.recorded
                .iter()
                .map(|ns| format!("{} ({})", ns.inode, ns.path))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let addresses = if format_version < 5 {
            format!("not recorded (format version {format_version}; from version 5 on)")
        } else if self.address_tables == 0 {
            "no address table in the file".to_owned()
        } else {
            format!(
                "{} held in {} namespace(s), {} of them in recorded ones ({} table(s))",
                self.addresses, self.namespaces, self.recorded_addresses, self.address_tables
            )
        };
        vec![("namespaces", recorded), ("addresses", addresses)]
    }
}

/// The recorded clock samples, summarized.
#[derive(Serialize, Debug, Clone, Default, PartialEq)]
pub struct ClockSummary {
    /// Clock samples in the file (the rates below need two, spread over time).
    pub samples: usize,
    /// CLOCK_REALTIME − CLOCK_MONOTONIC at the first sample (ns): maps event times to wall time.
    pub realtime_minus_monotonic_ns: Option<i64>,
    /// Rate of CLOCK_MONOTONIC against CLOCK_MONOTONIC_RAW over the samples, in ppm (NTP slewing
    /// and `--clock-skew` show here).
    pub monotonic_vs_raw_ppm: Option<f64>,
    /// TSC ticks per CLOCK_MONOTONIC_RAW second, where the CPU has a TSC.
    pub tsc_hz: Option<f64>,
    /// The kernel's clock discipline (adjtimex) as recorded, version 2 on; None without states.
    pub kernel_clock: Option<KernelClockSummary>,
    /// How much NTP slewing the analyzer undoes from the samples, and how well; None when it
    /// cannot (`slew_unavailable` says why).
    pub slew: Option<SlewSummary>,
    /// Why the slewing cannot be undone; None when `slew` is given.
    pub slew_unavailable: Option<String>,
}

/// The recorded kernel clock-discipline states, summarized.
#[derive(Serialize, Debug, Clone, PartialEq)]
pub struct KernelClockSummary {
    /// States recorded: one at the start, one per change of frequency, offset, tick or status.
    pub states: usize,
    /// The first state.
    pub first: KernelClock,
    /// The last state.
    pub last: KernelClock,
}

/// `timex.status` bit: the clock is not synchronized.
const STA_UNSYNC: i32 = 0x0040;
/// `timex.status` bit: `offset` is in nanoseconds (else microseconds).
const STA_NANO: i32 = 0x2000;

/// A rate in ppm as `info` prints it: signed, three decimals, no "-0.000".
fn ppm(value: f64) -> String {
    let value = if value.abs() < 5e-4 { 0.0 } else { value };
    format!("{value:+.3}")
}

/// A kernel clock state in words: frequency correction, tick, pending offset, synchronization.
fn describe_kernel_clock(k: &KernelClock) -> String {
    let offset = if k.status & STA_NANO != 0 {
        k.offset as f64
    } else {
        k.offset as f64 * 1e3
    };
    format!(
        "frequency {} ppm, tick {} µs, offset {:.0} ns, status {:#x}{}",
        ppm(k.freq as f64 / 65536.0),
        k.tick,
        offset,
        k.status,
        if k.status & STA_UNSYNC != 0 {
            " (unsynchronized)"
        } else {
            ""
        }
    )
}

impl ClockSummary {
    /// The lines `info` prints after its `clock` line, as (key, value): the kernel's clock
    /// discipline, the slewing undone (or why not), the rate history.
    pub fn detail_lines(&self) -> Vec<(&'static str, String)> {
        let mut lines = Vec::new();
        if let Some(k) = &self.kernel_clock {
            let mut text = format!(
                "{} state(s); at start {}",
                k.states,
                describe_kernel_clock(&k.first)
            );
            if k.states > 1 {
                text.push_str(&format!("; last {}", describe_kernel_clock(&k.last)));
            }
            lines.push(("kernel clock", text));
        }
        match (&self.slew, &self.slew_unavailable) {
            (Some(s), _) => {
                lines.push((
                    "slew undone",
                    format!(
                        "rate {} ppm ({} .. {}), phase moved {:.0} ns, {} piece(s), \
                         bound {:.0} ns; brackets {}/{}/{} ns (min/median/max), samples up to \
                         {:.1} ms apart",
                        ppm(s.rate_mean_ppm),
                        ppm(s.rate_min_ppm),
                        ppm(s.rate_max_ppm),
                        s.max_phase_ns,
                        s.pieces,
                        s.bound_ns,
                        s.bracket_ns[0],
                        s.bracket_ns[1],
                        s.bracket_ns[2],
                        s.max_gap_ns as f64 * 1e-6
                    ),
                ));
                const SHOWN: usize = 30;
                let h = &s.history;
                let mut text = format!("ppm per {} s from {:.3} s:", h.step_s, h.start_ns * 1e-9);
                for &rate in h.ppm.iter().take(SHOWN) {
                    text.push(' ');
                    text.push_str(&ppm(rate));
                }
                if h.ppm.len() > SHOWN {
                    text.push_str(&format!(" … ({} more in --json)", h.ppm.len() - SHOWN));
                }
                lines.push(("rate history", text));
            }
            (None, Some(why)) => lines.push(("slew", format!("not undone: {why}"))),
            (None, None) => {}
        }
        lines
    }
}

/// Where a file is damaged.
#[derive(Serialize, Debug, Clone, PartialEq, Eq)]
pub struct DamageInfo {
    /// Byte offset of the first chunk that could not be read.
    pub offset: u64,
    /// Bytes from there to the end of the file, which were not read.
    pub bytes_discarded: u64,
    /// What was wrong with that chunk.
    pub reason: String,
}

impl EventCounts {
    fn add(&mut self, events: &[PacketEvent], last_ns: &mut Option<u64>, passages: &mut Passages) {
        for e in events {
            passages.add(e);
            self.encapsulated += u64::from(e.flags & flag::ENCAPSULATED != 0);
            self.total += 1;
            match e.direction {
                direction::SEND => self.send += 1,
                _ => self.recv += 1,
            }
            match e.kind {
                kind::TCP4 => self.tcp4 += 1,
                kind::TCP6 => self.tcp6 += 1,
                kind::UDP6_HASHED => self.udp6 += 1,
                _ => self.udp4 += 1,
            }
            if last_ns.is_some_and(|last| e.ts_ns < last) {
                self.out_of_order += 1;
            }
            *last_ns = Some(e.ts_ns);
        }
    }
}

impl ClockSummary {
    fn from_samples(samples: &[ClockSample], bracketed: bool, kernel: &[KernelClock]) -> Self {
        let (slew, slew_unavailable) = match SlewCorrection::from_samples(samples, bracketed) {
            Ok(c) => (Some(c.summary()), None),
            Err(why) => (None, Some(why.to_string())),
        };
        let kernel_clock = match (kernel.first(), kernel.last()) {
            (Some(&first), Some(&last)) => Some(KernelClockSummary {
                states: kernel.len(),
                first,
                last,
            }),
            _ => None,
        };
        let (Some(first), Some(last)) = (samples.first(), samples.last()) else {
            return ClockSummary {
                kernel_clock,
                slew,
                slew_unavailable,
                ..ClockSummary::default()
            };
        };
        let raw_span = last.monotonic_raw_ns as f64 - first.monotonic_raw_ns as f64;
        let rate = |span: f64| (raw_span > 0.0).then(|| span / raw_span);
        ClockSummary {
            samples: samples.len(),
            realtime_minus_monotonic_ns: Some(
                first.realtime_ns.wrapping_sub(first.monotonic_ns as i64),
            ),
            // Between the brackets' middles (version 1 samples have no bracket).
            monotonic_vs_raw_ppm: rate(
                (last.monotonic_ns as f64 + last.monotonic_after_ns as f64
                    - first.monotonic_ns as f64
                    - first.monotonic_after_ns as f64)
                    / 2.0,
            )
            .map(|r| (r - 1.0) * 1e6),
            tsc_hz: rate(last.tsc as f64 - first.tsc as f64)
                .filter(|&r| r > 0.0)
                .map(|r| r * 1e9),
            kernel_clock,
            slew,
            slew_unavailable,
        }
    }
}

/// Reads `path` once, start to end, in constant memory.
pub fn inspect(path: &Path) -> Result<TraceSummary, InputError> {
    let mut reader = TraceFile::open(path)?;
    let mut events = EventCounts::default();
    let mut passages = Passages::default();
    let (mut first_ns, mut last_ns) = (None, None);
    while let Some(chunk) = reader.next_chunk()? {
        if first_ns.is_none() {
            first_ns = chunk.first().map(|e| e.ts_ns);
        }
        events.add(chunk, &mut last_ns, &mut passages);
    }
    events.forwarded = passages.forwarded;
    let bytes = std::fs::metadata(path)
        .map_err(|e| InputError::io(path, e))?
        .len();
    // A second pass that reads only the chunk headers and the address tables (it seeks over
    // everything else).
    let tables = read_address_tables(path).map_err(|e| InputError::Trace {
        path: path.to_owned(),
        what: e.to_string(),
    })?;
    Ok(TraceSummary {
        path: path.to_owned(),
        header: reader.header().clone(),
        format_version: reader.version(),
        size: SizeSummary::new(bytes, events.total),
        events,
        lost: reader.lost().clone(),
        first_ns,
        last_ns,
        clock: ClockSummary::from_samples(
            reader.clock_samples(),
            reader.samples_bracketed(),
            reader.kernel_clock(),
        ),
        namespaces: NamespaceSummary::new(reader.header(), &tables.tables),
        complete: reader.footer().is_some(),
        damage: reader.damage().map(|d| DamageInfo {
            offset: d.offset,
            bytes_discarded: d.bytes_discarded,
            reason: d.reason.clone(),
        }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Samples every 20 ms with 50 ns brackets, the monotonic clock 100 ppm fast.
    fn samples(n: u64) -> Vec<ClockSample> {
        (0..n)
            .map(|i| {
                let raw = 1_000_000_000 + i * 20_000_000;
                let mono = 2_000_000_000 + i * 20_002_000;
                ClockSample {
                    monotonic_ns: mono - 25,
                    monotonic_raw_ns: raw,
                    realtime_ns: 0,
                    tsc: 0,
                    monotonic_after_ns: mono + 25,
                }
            })
            .collect()
    }

    #[test]
    fn bracketed_samples_show_the_slewing_undone() {
        let kernel = KernelClock {
            freq: 100 * 65536,
            tick: 10_000,
            status: 0x2001,
            ..Default::default()
        };
        let c = ClockSummary::from_samples(&samples(100), true, &[kernel]);
        let slew = c.slew.as_ref().expect("dense bracketed samples");
        assert!((slew.rate_mean_ppm - 100.0).abs() < 0.01, "{slew:?}");
        assert_eq!(slew.pieces, 1);
        assert!(c.slew_unavailable.is_none());
        assert_eq!(c.kernel_clock.as_ref().unwrap().states, 1);
        let lines = c.detail_lines();
        let keys: Vec<&str> = lines.iter().map(|l| l.0).collect();
        assert_eq!(keys, ["kernel clock", "slew undone", "rate history"]);
        assert!(
            lines[0].1.contains("frequency +100.000 ppm"),
            "{}",
            lines[0].1
        );
        assert!(
            lines[1].1.starts_with("rate +100.000 ppm"),
            "{}",
            lines[1].1
        );
        assert!(lines[2].1.contains("ppm per 10 s"), "{}", lines[2].1);
    }

    #[test]
    fn addresses_are_counted_over_every_table_and_namespace() {
        use tsync_common::format::{IpPrefix, NamespaceAddresses};
        let ns = |inode, recorded, addrs: &[&str]| NamespaceAddresses {
            inode,
            recorded,
            addresses: addrs
                .iter()
                .map(|a| {
                    let (ip, len) = a.split_once('/').unwrap();
                    IpPrefix {
                        ip: ip.parse().unwrap(),
                        len: len.parse().unwrap(),
                    }
                })
                .collect(),
        };
        let tables = [
            AddressTable {
                monotonic_ns: 1,
                namespaces: vec![
                    ns(7, true, &["10.0.0.1/24"]),
                    ns(9, false, &["10.1.0.5/24"]),
                ],
            },
            // The pod moved to another namespace with the same address, and got an IPv6 one.
            AddressTable {
                monotonic_ns: 2,
                namespaces: vec![
                    ns(7, true, &["10.0.0.1/24"]),
                    ns(10, false, &["10.1.0.5/24", "fd00::5/64"]),
                ],
            },
        ];
        let mut header = Header::default();
        header.options.recorded_netns = vec![RecordedNetns {
            inode: 7,
            path: "/run/netns/a".into(),
        }];
        let s = NamespaceSummary::new(&header, &tables);
        assert_eq!(
            (
                s.address_tables,
                s.addresses,
                s.namespaces,
                s.recorded_addresses
            ),
            (2, 3, 3, 1)
        );
        assert_eq!(s.held.len(), 4);
        assert_eq!(
            s.lines(5),
            [
                ("namespaces", "7 (/run/netns/a)".to_owned()),
                (
                    "addresses",
                    "3 held in 3 namespace(s), 1 of them in recorded ones (2 table(s))".to_owned()
                )
            ]
        );
        let old = NamespaceSummary::new(&Header::default(), &[]);
        assert_eq!(
            old.lines(4)[1].1,
            "not recorded (format version 4; from version 5 on)"
        );
        assert_eq!(old.lines(5)[1].1, "no address table in the file");
    }

    #[test]
    fn version_1_samples_say_why_nothing_is_undone() {
        let mut old = samples(100);
        for s in &mut old {
            s.monotonic_after_ns = s.monotonic_ns;
        }
        let c = ClockSummary::from_samples(&old, false, &[]);
        assert!(c.slew.is_none() && c.kernel_clock.is_none());
        let why = "format version 1 samples carry no bracket; the recorded timebase is used";
        assert_eq!(c.slew_unavailable.as_deref(), Some(why));
        assert_eq!(c.detail_lines(), [("slew", format!("not undone: {why}"))]);
        assert!((c.monotonic_vs_raw_ppm.unwrap() - 100.0).abs() < 1e-6);
    }
}
