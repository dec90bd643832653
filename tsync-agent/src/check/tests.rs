use super::*;

#[test]
fn old_kernels_fail_and_new_ones_pass() {
    assert_eq!(kernel_line("5.4.0-150-generic").status, Status::Fail);
    assert_eq!(kernel_line("5.8.0").status, Status::Ok);
    assert_eq!(kernel_line("6.1.0-27-arm64").status, Status::Ok);
    assert_eq!(kernel_line("4.19.0").status, Status::Fail);
    assert_eq!(kernel_line("weird").status, Status::Warn);
}

#[test]
fn the_kernel_line_says_whether_events_are_batched() {
    assert!(
        kernel_line("5.10.0-28-amd64")
            .detail
            .ends_with("; events batched per CPU)")
    );
    let old = kernel_line("5.9.16");
    assert_eq!(old.status, Status::Ok);
    assert!(
        old.detail
            .contains("before 5.10 each event is written on its own"),
        "{}",
        old.detail
    );
}

#[test]
fn ntp_words_tell_sync_and_slew() {
    // Synchronized, nanosecond offsets, slewing 250 µs at +12.5 ppm.
    let s = describe_ntp(0, STA_NANO, 250_000, 12 * 65536 + 32768);
    assert!(s.starts_with("synchronized"), "{s}");
    assert!(s.contains("+12.500 ppm") && s.contains("250.0 µs"), "{s}");
    // Microsecond offsets are scaled.
    assert!(describe_ntp(0, 0, 250, 0).contains("250.0 µs"));
    let free = describe_ntp(TIME_ERROR, STA_UNSYNC, 0, 0);
    assert!(
        free.starts_with("not synchronized") && free.contains("not slewing"),
        "{free}"
    );
}

#[test]
fn disk_verdicts_follow_the_typical_rate() {
    let dir = Path::new("/data");
    let rate = TYPICAL_EVENTS_PER_S * BYTES_PER_EVENT;
    assert_eq!(disk_verdict(dir, 30 * rate).status, Status::Fail);
    assert_eq!(disk_verdict(dir, 600 * rate).status, Status::Warn);
    let ok = disk_verdict(dir, 10 * 3600 * rate);
    assert_eq!(ok.status, Status::Ok);
    assert!(
        ok.detail.contains("10.0 h") && ok.detail.contains("/data"),
        "{}",
        ok.detail
    );
}

#[test]
fn an_unwritable_directory_fails() {
    let line = disk_line(Path::new("/nonexistent/tsync-check"));
    assert_eq!(line.status, Status::Fail);
    assert!(line.detail.contains("cannot write"), "{}", line.detail);
}

#[test]
fn lines_read_as_one_verdict_each() {
    let line = Line::new(Status::Fail, "privileges", "missing CAP_BPF");
    assert_eq!(line.to_string(), "FAIL privileges: missing CAP_BPF");
    assert_eq!(
        clocksource_line("hpet").status,
        Status::Warn,
        "a slow clocksource is worth a warning"
    );
    assert_eq!(clocksource_line("tsc").status, Status::Ok);
}
