use super::*;
use crate::output::export::pcapng::{internet_checksum, ones_complement_sum};
use crate::timeline::PeerRef;
use tsync_common::{ETH_P_IP, tcp_flag};

pub(crate) fn tcp4(dir: u8, seq: u32) -> PacketEvent {
    PacketEvent {
        ts_ns: 1_000,
        ifindex: 2,
        cpu: 1,
        direction: dir,
        kind: kind::TCP4,
        saddr: [10, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
        daddr: [10, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
        network_protocol: ETH_P_IP,
        tot_len: 1500,
        source: 40000,
        dest: 80,
        seq,
        ack_seq: 7,
        transport_protocol: IPPROTO_TCP,
        ihl: 5,
        doff: 8,
        tcp_flags: tcp_flag::ACK | tcp_flag::PSH,
        ..PacketEvent::default()
    }
}

#[test]
fn ipv4_tcp_headers_are_valid_and_truncated() {
    let p = rebuild_packet(&tcp4(direction::SEND, 99));
    assert_eq!(p.bytes.len(), 20 + 32);
    assert_eq!(p.original_len, 1500);
    // The IP header checksums to zero, as a receiver verifies it.
    assert_eq!(internet_checksum(&p.bytes[..20], 0), 0);
    assert_eq!(&p.bytes[2..4], &1500u16.to_be_bytes());
    assert_eq!(&p.bytes[24..28], &99u32.to_be_bytes());
    assert_eq!(p.bytes[32] >> 4, 8);
    assert_eq!(p.bytes[33], tcp_flag::ACK | tcp_flag::PSH);
    // The TCP checksum verifies over pseudo-header + rebuilt segment.
    let e = tcp4(direction::SEND, 99);
    let mut pseudo = Vec::new();
    pseudo.extend_from_slice(&e.saddr[..4]);
    pseudo.extend_from_slice(&e.daddr[..4]);
    pseudo.extend_from_slice(&[0, 6, 0, 32]);
    assert_eq!(
        internet_checksum(&p.bytes[20..], ones_complement_sum(&pseudo)),
        0
    );
}

#[test]
fn inconsistent_lengths_are_made_consistent() {
    let mut e = tcp4(direction::RECV, 1);
    e.tot_len = 3; // impossible: shorter than the headers
    let p = rebuild_packet(&e);
    assert_eq!(p.original_len as usize, p.bytes.len());
    assert_eq!(
        u16::from_be_bytes([p.bytes[2], p.bytes[3]]) as usize,
        p.bytes.len()
    );
}

fn events() -> Vec<PacketEvent> {
    vec![tcp4(direction::SEND, 5), tcp4(direction::RECV, 5)]
}

fn export(format: ExportFormat, evs: &[PacketEvent]) -> Vec<u8> {
    let nodes = vec!["alpha".to_string(), "beta".to_string()];
    let mut out = Vec::new();
    let mut sink = exporter(format, &mut out, &nodes, &ExportOptions::default()).unwrap();
    for (i, ev) in evs.iter().enumerate() {
        sink.write_event(&ExportEvent {
            node: i % 2,
            index: i as u64 / 2,
            event: ev,
            original_ns: 1_000 + i as i64,
            corrected_ns: 2_000 + i as i64,
            peer: (i < 2).then_some(PeerRef {
                node: 1 - i % 2,
                index: 0,
            }),
        })
        .unwrap();
    }
    sink.finish().unwrap();
    drop(sink);
    out
}

#[test]
fn jsonl_parses_back() {
    let out = export(ExportFormat::Jsonl, &events());
    let lines: Vec<serde_json::Value> = String::from_utf8(out)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0]["node"], "alpha");
    assert_eq!(lines[0]["direction"], "send");
    assert_eq!(lines[1]["direction"], "recv");
    assert_eq!(lines[1]["corrected_ns"], 2001);
    assert_eq!(lines[1]["original_ns"], 1001);
    assert_eq!(lines[0]["saddr"], "10.0.0.1");
    assert_eq!(lines[0]["tcp_flags"], "P.");
    assert_eq!(lines[0]["seq"], 5);
    assert_eq!(lines[0]["peer_node"], "beta");
    assert_eq!(lines[1]["peer_node_index"], 0);
}

#[test]
fn jsonl_shows_udp_payload_bytes_and_ipv6_addresses() {
    let udp = PacketEvent {
        kind: kind::UDP4,
        transport_protocol: IPPROTO_UDP,
        udp_len: 8 + 3,
        udp_data: [0xde, 0xad, 0xbe, 0, 0, 0, 0, 0],
        ..tcp4(direction::SEND, 0)
    };
    let mut v6 = tcp4(direction::RECV, 1);
    v6.kind = kind::TCP6;
    v6.network_protocol = ETH_P_IPV6;
    v6.saddr = [0; 16];
    v6.saddr[0] = 0xfd;
    v6.saddr[15] = 1;
    let out = export(ExportFormat::Jsonl, &[udp, v6]);
    let text = String::from_utf8(out).unwrap();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines[0]["kind"], "udp4");
    assert_eq!(lines[0]["udp_data"], "deadbe");
    assert_eq!(lines[1]["kind"], "tcp6");
    assert_eq!(lines[1]["saddr"], "fd00::1");
    // The rebuilt UDP packet carries exactly the recorded payload bytes.
    let p = rebuild_packet(&udp);
    assert_eq!(p.bytes.len(), 20 + 8 + 3);
    assert_eq!(&p.bytes[28..], &[0xde, 0xad, 0xbe]);
    assert_eq!(p.original_len, 20 + 11);
}

#[test]
fn hashed_udp_is_named_and_its_hash_never_written_as_payload() {
    let udp = PacketEvent {
        kind: kind::UDP6_HASHED,
        network_protocol: ETH_P_IPV6,
        transport_protocol: IPPROTO_UDP,
        udp_len: 8 + 100,
        udp_data: [1, 2, 3, 4, 5, 6, 7, 8],
        ..tcp4(direction::SEND, 0)
    };
    let out = export(ExportFormat::Jsonl, &[udp]);
    let line: serde_json::Value =
        serde_json::from_str(String::from_utf8(out).unwrap().lines().next().unwrap()).unwrap();
    assert_eq!(line["kind"], "udp6_hashed");
    assert_eq!(line["udp_data"], "0102030405060708");
    // IPv6 and UDP headers only: the payload was never recorded.
    let p = rebuild_packet(&udp);
    assert_eq!(p.bytes.len(), 40 + 8);
    assert_eq!(p.original_len, 40 + 108);
}

#[test]
fn csv_parses_back_and_has_a_header_even_when_empty() {
    let out = export(ExportFormat::Csv, &events());
    let mut reader = csv::Reader::from_reader(out.as_slice());
    assert_eq!(reader.headers().unwrap(), CSV_COLUMNS.as_slice());
    let rows: Vec<std::collections::HashMap<String, String>> =
        reader.deserialize().map(Result::unwrap).collect();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0]["node"], "alpha");
    assert_eq!(rows[1]["node"], "beta");
    assert_eq!(rows[1]["peer_node"], "alpha");
    assert_eq!(rows[0]["corrected_ns"], "2000");
    let empty = export(ExportFormat::Csv, &[]);
    assert_eq!(
        String::from_utf8(empty).unwrap().trim_end(),
        CSV_COLUMNS.join(",")
    );
}

#[test]
fn unknown_node_and_format_are_clear_errors() {
    assert!(
        "xml"
            .parse::<ExportFormat>()
            .unwrap_err()
            .to_string()
            .contains("pcapng")
    );
    let mut out = Vec::new();
    let mut sink = JsonlExporter::new(&mut out, &[]);
    let ev = tcp4(direction::SEND, 1);
    let err = sink
        .write(&ExportEvent {
            node: 3,
            index: 0,
            event: &ev,
            original_ns: 0,
            corrected_ns: 0,
            peer: None,
        })
        .unwrap_err();
    assert!(matches!(err, ExportError::NoSuchNode { node: 3, .. }));
}
