//! The agent's output under a file system that stalls (root only): events keep coming off the
//! ring buffer while the file system accepts no write; within the buffer (`--buffer-size`) nothing
//! is lost, beyond it the drops are counted as lost to the disk, and the file stays complete.
//!
//! The file system is `tsync_lab::StallingFs` (FUSE, Python): its writes block while a gate is
//! closed. The tests close the gate, wait until the agent's writer is blocked at it, send a burst,
//! wait for the agent to report what it did with the burst, and only then open the gate: what
//! they check does not depend on the machine's speed. (The agent before this design blocked its
//! drain with its writes: it never reports taking the burst, and fails both.) `#[ignore]`d like the capture tests;
//! `cargo xtask test` runs them as root.
use std::{
    net::{SocketAddr, UdpSocket},
    path::Path,
    sync::Mutex,
};

use tsync_common::{PacketEvent, direction, format::TraceReader};
use tsync_lab::{Agent, Stall, StallingFs, Stopped, VethPair, record_command, unique_name};

const V4: [&str; 2] = ["10.76.0.1", "10.76.0.2"];
const PORT: u16 = 5570;
/// The burst: 150 000 datagrams, one receive event each in the agent's namespace, 12 MB of
/// events. The default ring buffer (16 MiB) holds 190 000 events, so the kernel loses none of
/// them however late the agent drains.
const BURST: u32 = 150_000;

/// Serializes the tests of this file: they create namespaces and FUSE mounts.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    assert!(
        tsync_lab::is_root(),
        "the output tests need root (network namespaces, eBPF, FUSE); run them as root, as CI does"
    );
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// An agent recording namespace 0 of `link` into `file`, with the output's debug lines on.
fn start(link: &VethPair, file: &Path, args: &[&str]) -> Agent {
    let bin = tsync_lab::agent_binary().expect("cannot build tsync-agent");
    let mut cmd = record_command(&bin, Some(&link.ns[0]), file);
    cmd.args(args).env("RUST_LOG", "tsync_agent::output=debug");
    Agent::start(cmd).unwrap()
}

/// Sends the burst from namespace 1 to namespace 0, as fast as one socket goes.
fn burst(link: &VethPair) {
    let dst: SocketAddr = format!("{}:{PORT}", V4[0]).parse().unwrap();
    link.ns[1].run_in(move || {
        let s = UdpSocket::bind("0.0.0.0:0").unwrap();
        for i in 0..BURST {
            s.send_to(&i.to_be_bytes(), dst).unwrap();
        }
    });
}

/// The events of the burst in a complete trace file, and its reader at the end.
fn read_burst(
    file: &Path,
) -> (
    Vec<PacketEvent>,
    TraceReader<std::io::BufReader<std::fs::File>>,
) {
    let mut r = TraceReader::open(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let mut events: Vec<PacketEvent> = Vec::new();
    while let Some(chunk) = r.next_events().unwrap() {
        events.extend(
            chunk
                .iter()
                .filter(|e| e.direction == direction::RECV && e.dest == PORT),
        );
    }
    assert!(r.damage().is_none(), "damaged: {:?}", r.damage());
    assert!(
        r.footer().is_some(),
        "the file is complete: it has its footer"
    );
    assert!(
        events.windows(2).all(|w| w[0].ts_ns <= w[1].ts_ns),
        "time order"
    );
    (events, r)
}

/// The number before `what` in `text` (`… 123 events wait …`).
fn number_before(text: &str, what: &str) -> Option<u64> {
    let at = text.find(what)?;
    text[..at].split_whitespace().last()?.parse().ok()
}

#[test]
#[ignore = "needs root: cargo xtask test runs it"]
fn a_stalled_output_loses_nothing_within_the_buffer() {
    let _serial = serial();
    let fs = StallingFs::mount(Stall::Gate).unwrap();
    let link = VethPair::new(&unique_name("o"), V4, None).unwrap();
    let file = fs.path().join("stalled.trace");
    let mut agent = start(&link, &file, &[]);
    let gate = fs.close_gate().unwrap();
    // The writer's next flush (at most 0.5 s away) blocks at the gate.
    fs.wait_blocked().unwrap();
    burst(&link);
    // The drain goes on while the writer is blocked: wait until most of the burst waits in the
    // agent's buffer (a waiting line per flush; the rest may still be in the ring).
    agent
        .wait_for_line("half the burst waits for the writer", |line| {
            number_before(line, "events (").is_some_and(|n| n >= u64::from(BURST) / 2)
        })
        .unwrap();
    drop(gate);
    let Stopped { stdout, stderr, .. } = agent.stop_cleanly().unwrap();
    let (events, r) = read_burst(&file);
    let footer = r.footer().unwrap();
    assert_eq!(
        footer.lost.total(),
        0,
        "{:?}\n{stdout}\n{stderr}",
        footer.lost
    );
    assert!(
        events.len() as u64 >= u64::from(BURST) / 2,
        "{}",
        events.len()
    );
    assert!(
        stdout.contains("; 0 lost") && stdout.contains("0 events lost to the disk"),
        "{stdout}"
    );
    assert!(!stderr.contains("warning"), "{stderr}");
}

#[test]
#[ignore = "needs root: cargo xtask test runs it"]
fn a_stall_beyond_the_buffer_is_counted_as_lost_to_the_disk_and_the_file_stays_complete() {
    let _serial = serial();
    let fs = StallingFs::mount(Stall::Gate).unwrap();
    let link = VethPair::new(&unique_name("o"), V4, None).unwrap();
    let file = fs.path().join("overrun.trace");
    // 1 MiB holds 13 000 events: a small part of the burst.
    let mut agent = start(&link, &file, &["--buffer-size", "1M"]);
    let gate = fs.close_gate().unwrap();
    fs.wait_blocked().unwrap();
    burst(&link);
    agent.wait_for("dropping events").unwrap();
    drop(gate);
    let Stopped { stdout, stderr, .. } = agent.stop_cleanly().unwrap();
    let (events, r) = read_burst(&file);
    let lost = &r.footer().unwrap().lost;
    assert!(lost.disk > 0, "{lost:?}");
    assert_eq!(
        lost.send + lost.recv,
        0,
        "the ring buffer lost nothing: {lost:?}"
    );
    assert!(
        events.len() as u64 + lost.disk <= u64::from(BURST),
        "{} written, {lost:?}",
        events.len()
    );
    assert_eq!(
        r.lost().disk,
        lost.disk,
        "the last lost chunk agrees with the footer"
    );
    assert!(
        stdout.contains(&format!("{} events lost to the disk", lost.disk))
            && stdout.contains(&format!("; {} lost", lost.disk)),
        "{stdout}"
    );
    assert!(
        stderr.contains(&format!("{} events were lost on the way to", lost.disk))
            && stderr.contains("did not accept writes for")
            && stderr.contains("--buffer-size"),
        "the warning names the cause and the remedy: {stderr}"
    );
    assert!(
        !stderr.contains("--ring-size"),
        "not blamed on the ring buffer: {stderr}"
    );
}
