use std::sync::atomic::Ordering;
use std::time::Duration;

use clap::Parser;

use super::*;
use crate::Offloads;
use crate::vm::guest::GuestArgs;
use crate::vm::tscpage::tsc;

fn options(offloads: Offloads) -> LabOptions {
    LabOptions {
        kernels: vec!["6.1".parse().unwrap()],
        guests: 3,
        duration: 12.0,
        seed: None,
        out: None,
        offloads,
    }
}

fn binaries() -> GuestBinaries {
    GuestBinaries {
        agent: "/w/target/release/tsync-agent".into(),
        lab: "/w/target/release/tsync-lab".into(),
    }
}

/// The `tsync-lab` command line as the binary parses it.
#[derive(Parser)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Subcommand)]
enum Command {
    Guest(GuestArgs),
}

/// Parses a guest's shell command back into the guest program's options (the paths have no
/// spaces; the redirection is the shell's).
fn parse(exec: &str) -> (String, GuestArgs, String) {
    let words: Vec<&str> = exec.split_whitespace().collect();
    let redirect = words.iter().position(|w| *w == ">").expect("a redirection");
    let unquote = |w: &str| w.trim_matches('\'').to_owned();
    let argv: Vec<String> = words[..redirect].iter().map(|w| unquote(w)).collect();
    let Command::Guest(args) = Cli::try_parse_from(&argv).unwrap().command;
    (argv[0].clone(), args, unquote(words[redirect + 1]))
}

#[test]
fn each_guest_runs_the_lab_binary_with_its_own_options() {
    let plan = SlewPlan {
        guest: 2,
        ppm: -317.0,
        after: 4.25,
    };
    let out = Path::new("/w/target/lab/9");
    for k in 0..3 {
        let exec = guest_command(&options(Offloads::Off), &binaries(), k, plan, out);
        let (program, args, log) = parse(&exec);
        assert_eq!(program, "/w/target/release/tsync-lab");
        assert_eq!((args.index, args.guests, args.duration), (k, 3, 12.0));
        assert_eq!(args.agent, binaries().agent);
        assert_eq!(args.out, out);
        assert_eq!(args.offloads, Offloads::Off);
        assert_eq!(log, format!("/w/target/lab/9/guest-{k}.log"));
        if k == 2 {
            assert_eq!((args.slew_ppm, args.slew_after), (-317.0, 4.25));
        } else {
            assert_eq!(args.slew_ppm, 0.0, "{exec}");
        }
    }
    let exec = guest_command(&options(Offloads::Kernel), &binaries(), 0, plan, out);
    assert!(!exec.contains("--offloads"), "{exec}");
    assert_eq!(parse(&exec).1.offloads, Offloads::Kernel);
}

/// What a guest does on the page, in the guest program's order; returns the TSC read just
/// before it set `Ready` and its offset bracket.
fn guest(page: &TscPage, k: usize) -> (u64, crate::vm::tscpage::OffsetBracket) {
    let patience = Duration::from_secs(30);
    page.slot(k, SlotWord::Booted).store(1, Ordering::Release);
    page.wait_global(GlobalWord::AllBooted, patience).unwrap();
    let bracket = page.measure_offset(k, 50, patience).unwrap();
    let before_ready = tsc();
    page.slot(k, SlotWord::Ready).store(1, Ordering::Release);
    page.wait_global(GlobalWord::Go, patience).unwrap();
    page.slot(k, SlotWord::Done).store(1, Ordering::Release);
    page.wait_global(GlobalWord::Stop, patience).unwrap();
    page.slot(k, SlotWord::Finished).store(1, Ordering::Release);
    page.wait_global(GlobalWord::AllFinished, patience).unwrap();
    (before_ready, bracket)
}

#[test]
fn guests_meet_at_every_barrier_and_measure_their_offset_through_the_host_page() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("page");
    let host = HostPage::create_at(path.clone(), 3).unwrap();
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    let page = Arc::new(TscPage::map(&file, PAGE_BYTES).unwrap());
    let guests: Vec<_> = (0..3)
        .map(|k| {
            let page = page.clone();
            std::thread::spawn(move || guest(&page, k))
        })
        .collect();
    let results: Vec<_> = guests.into_iter().map(|g| g.join().unwrap()).collect();
    let word = |w| page.global(w).load(Ordering::Acquire);
    let (booted, go, stop, finished) = (
        word(GlobalWord::AllBooted),
        word(GlobalWord::Go),
        word(GlobalWord::Stop),
        word(GlobalWord::AllFinished),
    );
    assert!(0 < booted && booted <= go && go <= stop && stop <= finished);
    for (k, (before_ready, bracket)) in results.iter().enumerate() {
        // One machine, one TSC: the true offset is 0. The host opened the gate only once every
        // guest was ready.
        assert!(bracket.lo <= 0 && 0 <= bracket.hi, "guest {k}: {bracket:?}");
        assert!(
            *before_ready <= go,
            "guest {k} was not ready when the traffic started"
        );
    }
    assert!(host.close(), "the helper thread panicked");
    assert!(!path.exists(), "the page's file was left behind");
}

#[test]
fn a_missing_report_says_where_to_look() {
    let dir = tempfile::tempdir().unwrap();
    let why = read_report(dir.path(), 1).unwrap_err();
    assert!(
        why.contains("guest-1.log") && why.contains("vm-1.log"),
        "{why}"
    );
    std::fs::write(dir.path().join("guest-1.error"), "no ivshmem device\n").unwrap();
    assert_eq!(read_report(dir.path(), 1).unwrap_err(), "no ivshmem device");
    std::fs::write(dir.path().join("guest-1.json"), "{").unwrap();
    assert!(
        read_report(dir.path(), 1)
            .unwrap_err()
            .contains("guest-1.json")
    );
}
