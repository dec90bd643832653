//! Seeds of the `ctf_reader` fuzz target (`fuzz/fuzz_targets/ctf_reader.rs`): a little-endian
//! `u32` metadata length, the metadata, then two streams of equal length. They are written with
//! the analyzer's CTF writer, hence behind the `check` feature (which depends on the analyzer).

use std::path::Path;

use anyhow::{Context, Result};
use tsync_analyze::ctf::metadata::Metadata;
use tsync_analyze::ctf::writer::KernelTrace;
use tsync_common::{ETH_P_IP, IPPROTO_TCP, PacketEvent, kind, tcp_flag};

/// The target's input from a metadata file's bytes and two streams.
fn encode(metadata: &[u8], a: &[u8], b: &[u8]) -> Vec<u8> {
    let mut out = (metadata.len() as u32).to_le_bytes().to_vec();
    out.extend_from_slice(metadata);
    out.extend_from_slice(a);
    out.extend_from_slice(b);
    out
}

/// The same input with the metadata as plain TSDL text (the form mutations reach best).
fn encode_text(metadata: &[u8], a: &[u8], b: &[u8]) -> Result<Vec<u8>> {
    let text = Metadata::parse(metadata).context("seed metadata")?.text;
    Ok(encode(text.as_bytes(), a, b))
}

fn read(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))
}

/// Seeds: LTTng-UST's Python trace of the tests, a small LTTng 2.10-shaped kernel trace (TCP
/// over IPv4, scheduler and syscall events), each with packetized and plain-text metadata, and
/// the start of Trace Compass's LTTng 2.1 add-on trace when `shared/external` is there.
pub fn seeds(root: &Path, scratch: &Path) -> Result<Vec<super::Seed>> {
    let mut seeds = Vec::new();
    let ust = root.join("tsync-analyze/tests/data/ctf-python/ust/uid/65534/64-bit");
    let (meta, a, b) = (
        read(&ust.join("metadata"))?,
        read(&ust.join("lttng_python_channel_0"))?,
        read(&ust.join("lttng_python_channel_1"))?,
    );
    seeds.push(("ust-python".into(), encode(&meta, &a, &b)));
    seeds.push(("ust-python-text".into(), encode_text(&meta, &a, &b)?));

    let events: Vec<PacketEvent> = (0..24u32)
        .map(|n| {
            let mut e = PacketEvent {
                ts_ns: 1_000_000 + u64::from(n) * 150_000_000,
                ifindex: 2,
                direction: (n % 2) as u8,
                kind: kind::TCP4,
                network_protocol: ETH_P_IP,
                tot_len: 100,
                source: 5000,
                dest: 22,
                seq: n * 48,
                ack_seq: 7,
                transport_protocol: IPPROTO_TCP,
                ihl: 5,
                doff: 5,
                tcp_flags: tcp_flag::ACK,
                ..PacketEvent::default()
            };
            e.saddr[..4].copy_from_slice(&[10, 0, 0, 1]);
            e.daddr[..4].copy_from_slice(&[10, 0, 0, 2]);
            e
        })
        .collect();
    let dir = scratch.join("ctf-kernel");
    KernelTrace {
        hostname: "seed".into(),
        uuid: [3; 16],
        clock_offset_ns: 1_700_000_000_000_000_000,
        cpus: 1,
        filler: 2,
        packet_len: 1024,
    }
    .write(&dir, &events)
    .context("write the kernel seed trace")?;
    let (meta, stream) = (read(&dir.join("metadata"))?, read(&dir.join("channel0_0"))?);
    seeds.push(("kernel-2.10".into(), encode(&meta, &stream, &stream)));
    seeds.push((
        "kernel-2.10-text".into(),
        encode_text(&meta, &stream, &stream)?,
    ));

    let external = root
        .ancestors()
        .map(|d| d.join("shared/external"))
        .find(|d| d.is_dir());
    if let Some(scp) = external.map(|e| e.join("tracecompass-synctraces/scp_src")) {
        let meta = read(&scp.join("metadata"))?;
        let mut stream = read(&scp.join("channel0_0"))?;
        stream.truncate(16 << 10);
        seeds.push((
            "addon-scp-start".into(),
            encode_text(&meta, &stream, &stream)?,
        ));
    }
    Ok(seeds)
}
