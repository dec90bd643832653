//! The pcapng export read back by Wireshark's dissectors (tshark): packet count, one interface
//! per node, well-formed headers, and receive times after send times for matched messages.
//!
//! tshark is required (Debian package `tshark`; CI installs it): the test fails when it is
//! missing rather than skipping, so that a green run always means the export was checked.

use std::collections::HashMap;
use std::path::Path;
mod common;
use common::{epoch_ns, tshark};
use tsync_analyze::output::export::{ExportFormat, ExportOptions, exporter};
use tsync_analyze::{ExportEvent, PeerRef};
use tsync_common::{
    ETH_P_IP, ETH_P_IPV6, IPPROTO_TCP, IPPROTO_UDP, PacketEvent, direction, kind, tcp_flag,
};

const NODES: [&str; 3] = ["alpha", "beta", "gamma"];
/// 2023-11-14T22:13:20Z: corrected times become absolute dates.
const TIME_BASE_NS: i64 = 1_700_000_000_000_000_000;

fn v4(last: u8) -> [u8; 16] {
    let mut a = [0u8; 16];
    a[..4].copy_from_slice(&[10, 0, 0, last]);
    a
}

fn v6(last: u8) -> [u8; 16] {
    let mut a = [0u8; 16];
    a[0] = 0xfd;
    a[15] = last;
    a
}

fn tcp(
    kind: u8,
    dir: u8,
    saddr: [u8; 16],
    daddr: [u8; 16],
    seq: u32,
    flags: u8,
    len: u16,
) -> PacketEvent {
    let v6 = kind == tsync_common::kind::TCP6;
    PacketEvent {
        direction: dir,
        kind,
        saddr,
        daddr,
        network_protocol: if v6 { ETH_P_IPV6 } else { ETH_P_IP },
        tot_len: len,
        source: 43210,
        dest: 5201,
        seq,
        ack_seq: 1000,
        transport_protocol: IPPROTO_TCP,
        ihl: if v6 { 0 } else { 5 },
        doff: 8,
        tcp_flags: flags,
        ..PacketEvent::default()
    }
}

fn udp(dir: u8) -> PacketEvent {
    PacketEvent {
        direction: dir,
        kind: kind::UDP4,
        saddr: v4(2),
        daddr: v4(1),
        network_protocol: ETH_P_IP,
        tot_len: 20 + 8 + 32,
        source: 5353,
        dest: 40000,
        transport_protocol: IPPROTO_UDP,
        ihl: 5,
        udp_data: *b"tsync!!\0",
        udp_len: 8 + 32,
        ..PacketEvent::default()
    }
}

/// (node, event, corrected time, message id) in file order; messages have a send and a recv.
fn scenario() -> Vec<(usize, PacketEvent, i64, Option<usize>)> {
    use direction::{RECV, SEND};
    use tcp_flag::{ACK, PSH, SYN};
    let syn = tcp(kind::TCP4, SEND, v4(1), v4(2), 1, SYN, 20 + 40);
    let data = tcp(kind::TCP4, SEND, v4(1), v4(2), 2, ACK | PSH, 1500);
    let six = tcp(kind::TCP6, SEND, v6(1), v6(3), 9, ACK, 40 + 32 + 100);
    vec![
        (0, syn, 1_000, Some(0)),
        (
            1,
            PacketEvent {
                direction: RECV,
                ..syn
            },
            1_030,
            Some(0),
        ),
        (0, data, 2_000, Some(1)),
        (
            1,
            PacketEvent {
                direction: RECV,
                ..data
            },
            2_000,
            Some(1),
        ),
        (1, udp(SEND), 5_000, Some(2)),
        (0, udp(RECV), 5_021, Some(2)),
        (0, six, 9_000, Some(3)),
        (
            2,
            PacketEvent {
                direction: RECV,
                ..six
            },
            9_700,
            Some(3),
        ),
        // Unmatched: the peer's capture lost it.
        (
            2,
            PacketEvent {
                direction: RECV,
                ..data
            },
            12_000,
            None,
        ),
    ]
}

fn write_export(path: &Path) -> Vec<(usize, u64, i64, Option<usize>)> {
    let nodes: Vec<String> = NODES.iter().map(|s| s.to_string()).collect();
    let events = scenario();
    // Event index per node, and the peer of each message end.
    let mut next_index = [0u64; 3];
    let placed: Vec<(usize, u64)> = events
        .iter()
        .map(|(node, ..)| {
            next_index[*node] += 1;
            (*node, next_index[*node] - 1)
        })
        .collect();
    let file = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let options = ExportOptions {
        pcap_time_base_ns: TIME_BASE_NS,
        ..ExportOptions::default()
    };
    let mut sink = exporter(ExportFormat::Pcapng, file, &nodes, &options).unwrap();
    let mut written = Vec::new();
    for (k, (node, ev, corrected, msg)) in events.iter().enumerate() {
        let peer = msg.and_then(|m| {
            events
                .iter()
                .enumerate()
                .find(|(j, e)| *j != k && e.3 == Some(m))
                .map(|(j, _)| PeerRef {
                    node: placed[j].0,
                    index: placed[j].1,
                })
        });
        sink.write_event(&ExportEvent {
            node: *node,
            index: placed[k].1,
            event: ev,
            original_ns: *corrected - 500,
            corrected_ns: *corrected,
            peer,
        })
        .unwrap();
        written.push((*node, placed[k].1, *corrected, *msg));
    }
    sink.finish().unwrap();
    written
}

#[test]
fn pcapng_export_reads_back_in_tshark() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("export.pcapng");
    let written = write_export(&path);
    let file = path.to_str().unwrap();

    let fields = tshark(&[
        "-r",
        file,
        "-o",
        "ip.check_checksum:TRUE",
        "-T",
        "fields",
        "-E",
        "separator=|",
        "-e",
        "frame.number",
        "-e",
        "frame.interface_name",
        "-e",
        "frame.time_epoch",
        "-e",
        "frame.len",
        "-e",
        "frame.cap_len",
        "-e",
        "ip.src",
        "-e",
        "ipv6.src",
        "-e",
        "tcp.seq_raw",
        "-e",
        "udp.length",
        "-e",
        "ip.checksum.status",
        "-e",
        "frame.comment",
    ]);
    let rows: Vec<Vec<&str>> = fields.lines().map(|l| l.split('|').collect()).collect();
    // Packet count.
    assert_eq!(rows.len(), written.len(), "{fields}");
    // Each packet on its node's interface, at its corrected time (ns resolution kept).
    let mut times: HashMap<(usize, u64), i128> = HashMap::new();
    for (row, (node, index, corrected, _)) in rows.iter().zip(&written) {
        assert_eq!(row[1], NODES[*node], "{row:?}");
        let t = epoch_ns(row[2]);
        assert_eq!(t, TIME_BASE_NS as i128 + *corrected as i128, "{row:?}");
        times.insert((*node, *index), t);
        assert!(
            row[4].parse::<u32>().unwrap() < row[3].parse::<u32>().unwrap() || row[3] == row[4]
        );
    }
    assert_eq!(rows[0][5], "10.0.0.1");
    assert_eq!(rows[0][7], "1");
    assert_eq!(rows[0][3], "60", "original length = IP total length");
    assert_eq!(rows[4][8], "40");
    assert_eq!(rows[6][6], "fd00::1");
    assert_eq!(rows[0][9], "1", "IP header checksum verified good");
    assert!(
        rows[1][10].contains("peer event 0 of alpha"),
        "{:?}",
        rows[1]
    );

    // One interface per node, named after it.
    let mut reader =
        pcap_file::pcapng::PcapNgReader::new(std::fs::File::open(&path).unwrap()).unwrap();
    while let Some(block) = reader.next_block() {
        block.unwrap();
    }
    let names: Vec<String> = reader
        .interfaces()
        .iter()
        .map(|idb| {
            idb.options
                .iter()
                .find_map(|o| match o {
                    pcap_file::pcapng::blocks::interface_description::InterfaceDescriptionOption::IfName(n) => Some(n.to_string()),
                    _ => None,
                })
                .unwrap()
        })
        .collect();
    assert_eq!(names, NODES);
    let capinfos = tshark(&["-r", file, "-q", "-z", "io,phs"]);
    assert!(
        capinfos.contains("tcp") && capinfos.contains("udp"),
        "{capinfos}"
    );

    // No malformed packet, no expert warning or error. TCP sequence analysis is off: a merged
    // export holds every packet twice (once per node), which it reports as retransmissions.
    let bad = tshark(&[
        "-r",
        file,
        "-o",
        "tcp.analyze_sequence_numbers:FALSE",
        "-o",
        "ip.check_checksum:TRUE",
        "-o",
        "tcp.check_checksum:FALSE",
        "-Y",
        "_ws.malformed || _ws.expert.severity >= 0x00600000",
        "-T",
        "fields",
        "-e",
        "frame.number",
        "-e",
        "_ws.expert.message",
    ]);
    assert!(bad.trim().is_empty(), "tshark reports problems:\n{bad}");

    // Matched messages: receive time ≥ send time, as tshark reads them.
    for (k, (node, index, _, msg)) in written.iter().enumerate() {
        let Some(m) = msg else { continue };
        let ev = &scenario()[k].1;
        if ev.direction != direction::SEND {
            continue;
        }
        let (rn, ri, ..) = written
            .iter()
            .find(|w| w.3 == Some(*m) && (w.0, w.1) != (*node, *index))
            .unwrap();
        assert!(times[&(*rn, *ri)] >= times[&(*node, *index)], "message {m}");
    }
}
