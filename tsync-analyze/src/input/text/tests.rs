use super::*;

fn secs(s: &str) -> Result<i64, String> {
    let mut v = s.as_bytes().to_vec();
    v.push(b'\n');
    let mut p = 0;
    parse_seconds(&v, &mut p, "time")
}

#[test]
fn decimal_seconds_become_rounded_nanoseconds() {
    assert_eq!(secs("48.85"), Ok(48_850_000_000));
    assert_eq!(secs("0.0000000015"), Ok(2));
    assert_eq!(secs("0.0000000014999"), Ok(1));
    assert_eq!(secs("7"), Ok(7_000_000_000));
    assert_eq!(secs(".5"), Ok(500_000_000));
    assert_eq!(secs("1.5e3"), Ok(1_500_000_000_000));
    assert_eq!(secs("9223372036.854775807"), Ok(i64::MAX));
    assert!(secs("9223372036.854775808").is_err());
    assert!(secs("-1.0").unwrap_err().contains("negative"));
    assert!(secs("1.2x").is_err());
    assert!(secs("nan").is_err());
}

#[test]
fn matches_float_rounding_for_reference_values() {
    for s in [
        "48.85",
        "55.29",
        "65.50",
        "71.83",
        "0.1",
        "123.456789",
        "500.88",
    ] {
        let f: f64 = s.parse().unwrap();
        assert_eq!(secs(s).unwrap(), (f * 1e9).round() as i64, "{s}");
    }
}

#[test]
fn eight_digits_at_once() {
    assert_eq!(
        eight_digits(u64::from_le_bytes(*b"12345678")),
        Some(12_345_678)
    );
    assert_eq!(eight_digits(u64::from_le_bytes(*b"00000009")), Some(9));
    assert_eq!(
        eight_digits(u64::from_le_bytes(*b"99999999")),
        Some(99_999_999)
    );
    assert_eq!(eight_digits(u64::from_le_bytes(*b"1234567 ")), None);
    assert_eq!(eight_digits(u64::from_le_bytes(*b"1234:678")), None);
    assert_eq!(eight_digits(u64::from_le_bytes(*b"/2345678")), None);
    assert_eq!(secs("1.123456789"), Ok(1_123_456_789));
    assert_eq!(secs("1.12345678"), Ok(1_123_456_780));
    assert_eq!(secs("1.1234567891"), Ok(1_123_456_789));
    assert_eq!(secs("1.1234567895"), Ok(1_123_456_790));
}

#[test]
fn formatted_seconds_read_back_exactly() {
    for ns in [
        0i64,
        1,
        999_999_999,
        1_000_000_000,
        86_400_123_456_789,
        i64::MAX,
    ] {
        let mut s = String::new();
        format_seconds(ns, &mut s);
        assert_eq!(secs(&s), Ok(ns), "{s}");
    }
}

proptest::proptest! {
    /// Whatever line the fast path accepts, it reads exactly as the full parser does.
    #[test]
    fn fast_path_agrees_with_the_full_parser(
        s in "[0-9]{1,3}|[0-9]{8,10}|-1|",
        r in "[0-9]{1,3}",
        times in proptest::collection::vec(
            proptest::prop_oneof![
                4 => "[0-9]{1,2}\\.[0-9]{9}",
                2 => "[0-9]{9,11}\\.[0-9]{9}",
                1 => "[0-9]{1,2}\\.[0-9]{7,11}",
                1 => "[+-]?[0-9]{0,2}(\\.[0-9]{0,10})?(e[0-9])?",
            ],
            2,
        ),
        seps in proptest::collection::vec(proptest::prop_oneof![6 => " ", 1 => "  |\t"], 3),
        end in proptest::prop_oneof![6 => "\n", 1 => "\r\n| \n|x\n| 1\n"],
    ) {
        let line = format!("{s}{}{r}{}{}{}{}{end}", seps[0], seps[1], times[0], seps[2], times[1]);
        let b = line.as_bytes();
        if let Some((s, r, ts, tr, q)) = parse_record_fast(b, 0, 100) {
            let mut p = 0;
            let full = parse_record(b, &mut p, 100);
            proptest::prop_assert_eq!(full, Ok((s, r, ts, tr)), "{:?}", line);
            proptest::prop_assert_eq!(p, q);
        }
    }
}

#[test]
fn fast_path_takes_the_usual_lines() {
    let line = b"3 12 20.879216127 13.874484241\n";
    assert_eq!(
        parse_record_fast(line, 0, 13),
        Some((3, 12, 20_879_216_127, 13_874_484_241, line.len() - 1))
    );
    // Out of range, or not in the usual form: left to the full parser.
    assert_eq!(parse_record_fast(line, 0, 12), None);
    assert_eq!(
        parse_record_fast(b"3 1 20.8792161 1.000000000\n", 0, 13),
        None
    );
    assert_eq!(
        parse_record_fast(b"3 1 20.879216127 1.000000000 \n", 0, 13),
        None
    );
    assert_eq!(
        parse_record_fast(b"3 1 9999999999.999999999 1.000000000\n", 0, 13),
        None
    );
}
