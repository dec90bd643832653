use super::*;
use proptest::prelude::*;

fn loc(line: &str) -> Result<Located, LineError> {
    locate(line.as_bytes(), b"ts_ns", b"ts_ns_local")
}

#[test]
fn finds_the_top_level_field_only() {
    let line = r#"{"a":{"ts_ns":1},"s":"ts_ns","ts_ns":  -42 ,"z":[1,{"ts_ns":2}]}"#;
    let at = loc(line).unwrap();
    assert_eq!(at.value, -42);
    assert_eq!(&line[at.start..at.end], "-42");
}

#[test]
fn says_what_is_wrong() {
    assert_eq!(loc(r#"{"x":1}"#), Err(LineError::Missing));
    assert_eq!(loc(r#"[1,2]"#), Err(LineError::NotObject));
    assert_eq!(loc(r#"{"ts_ns":1,"ts_ns":2}"#), Err(LineError::Duplicate));
    assert_eq!(
        loc(r#"{"ts_ns":1.5}"#),
        Err(LineError::NotInteger("1.5".into()))
    );
    assert_eq!(
        loc(r#"{"ts_ns":"12"}"#),
        Err(LineError::NotInteger("\"12\"".into()))
    );
    assert_eq!(
        loc(r#"{"ts_ns":99999999999999999999}"#),
        Err(LineError::NotInteger("99999999999999999999".into()))
    );
    assert_eq!(
        loc(r#"{"ts_ns":1,"ts_ns_local":1}"#),
        Err(LineError::HasLocal)
    );
    assert!(matches!(loc(r#"{"ts_ns":1,}"#), Err(LineError::Syntax(_))));
    assert!(matches!(loc(r#"{"ts_ns":1} x"#), Err(LineError::Syntax(_))));
    // Bytes that are not UTF-8, in a string or outside one.
    for bad in [
        &b"{\"ts_ns\":1,\"a\":\"\xff\xfe long enough\"}"[..],
        b"{\"ts_ns\":1}\xc3",
    ] {
        assert!(matches!(
            locate(bad, b"ts_ns", b"ts_ns_local"),
            Err(LineError::Syntax(_))
        ));
    }
    // An escaped key is the same key.
    assert_eq!(loc(r#"{"ts\u005fns":7}"#).unwrap().value, 7);
}

/// Small JSON-ish texts: valid lines and their mutations.
fn texts() -> impl Strategy<Value = String> {
    let atom = prop_oneof![
        Just("1".to_string()),
        Just("-0.5e3".to_string()),
        Just("\"a\\\"b\\u00e9\"".to_string()),
        Just("true".to_string()),
        Just("null".to_string()),
        Just("[]".to_string()),
        Just("{}".to_string()),
        Just("\"ts_ns\"".to_string()),
        Just("\"\\ud83d\\ude00\"".to_string()),
        Just("\"a long string of more than eight bytes, é ü\"".to_string()),
        Just("\"tab\tinside\"".to_string()),
        "[ -~é\t\\\\]{0,40}".prop_map(|t| format!("\"{t}\"")),
        Just("\"\\udc00\"".to_string()),
    ];
    let value = atom.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(|v| format!("[{}]", v.join(","))),
            prop::collection::vec(("[a-z_]{1,6}", inner), 0..4).prop_map(|kv| {
                let m: Vec<String> = kv.iter().map(|(k, v)| format!("\"{k}\": {v}")).collect();
                format!("{{{}}}", m.join(", "))
            }),
        ]
    });
    (
        value,
        prop::collection::vec((0usize..64, any::<u8>()), 0..3),
    )
        .prop_map(|(v, edits)| {
            let mut b = format!("{{\"ts_ns\":123,\"v\":{v}}}").into_bytes();
            for (at, byte) in edits {
                let at = at % (b.len() + 1);
                match byte % 3 {
                    0 if at < b.len() => {
                        b.remove(at);
                    }
                    1 => b.insert(at, b"{}[]\",:\\ 0e-.x"[byte as usize % 14]),
                    _ if at < b.len() => b[at] = b"{}[]\",:\\ 0e-.x"[byte as usize % 14],
                    _ => {}
                }
            }
            String::from_utf8_lossy(&b).into_owned()
        })
}

proptest! {
    /// The scanner accepts exactly what serde_json accepts as a JSON object.
    #[test]
    fn agrees_with_serde_json(text in texts()) {
        let serde: Result<serde_json::Value, _> = serde_json::from_str(&text);
        let ours = loc(&text);
        match serde {
            Ok(serde_json::Value::Object(_)) => prop_assert!(
                !matches!(ours, Err(LineError::Syntax(_)) | Err(LineError::NotObject)),
                "{}: {:?}", text, ours
            ),
            Ok(_) => prop_assert_eq!(ours, Err(LineError::NotObject), "{}", text),
            Err(_) => prop_assert!(matches!(ours, Err(LineError::Syntax(_))), "{}: {:?}", text, ours),
        }
    }
}

#[test]
fn integers_to_the_ends_of_64_bits() {
    assert_eq!(integer(b"9223372036854775807"), Some(i64::MAX));
    assert_eq!(integer(b"-9223372036854775808"), Some(i64::MIN));
    assert_eq!(integer(b"9223372036854775808"), None);
    assert_eq!(integer(b"-9223372036854775809"), None);
    assert_eq!(integer(b"99999999999999999999"), None);
    assert_eq!(
        integer(b"1767225600123456789"),
        Some(1_767_225_600_123_456_789)
    );
    assert_eq!(integer(b"-0"), Some(0));
    for bad in [&b""[..], b"-", b"1.5", b"1e3", b"12a", b"+1"] {
        assert_eq!(integer(bad), None, "{:?}", bad);
    }
}

#[test]
fn lines_are_read_whole_across_buffers() {
    let text = b"{\"a\":1}\n{\"b\":\"a longer line than the buffer\"}\nlast";
    let mut r = std::io::BufReader::with_capacity(8, &text[..]);
    let mut got = Vec::new();
    let mut line = Vec::new();
    while read_line(&mut r, &mut line).unwrap() {
        got.push(String::from_utf8(std::mem::take(&mut line)).unwrap());
    }
    assert_eq!(
        got,
        [
            "{\"a\":1}\n",
            "{\"b\":\"a longer line than the buffer\"}\n",
            "last"
        ]
    );
}

/// The names `merge` looks for.
fn merge_names() -> Names<4> {
    Names::new([&b"ts_ns"[..], b"ts_ns_lo", b"ts_ns_hi", b"tsync_order"])
}

#[test]
fn the_fast_path_takes_what_apply_writes_and_leaves_the_rest() {
    let names = merge_names();
    let line = r#"{"ts_ns":1767225600000005719,"ts_ns_local":1767225600041240286,"ts_ns_lo":1767225600000004519,"ts_ns_hi":null,"level":"debug","ok":true,"x":-1.5e-3,"msg":"request 1 handled in 1.1 ms, é","trace_id":"9e3779b97f4a7c15"}"#.as_bytes();
    let m = flat::members(line, &names).expect("a flat line takes the fast path");
    assert_eq!(scan_members(line, &names), Ok(m));
    let m = flat::members(line, &names).unwrap();
    let text = |k: usize| m.at[k].map(|(s, e)| &line[s..e]);
    assert_eq!(text(0), Some(&b"1767225600000005719"[..]));
    assert_eq!(text(1), Some(&b"1767225600000004519"[..]));
    assert_eq!(text(2), Some(&b"null"[..]));
    assert_eq!((text(3), m.duplicate), (None, None));
    let spaced = br#" { "ts_ns" : 7 , "ts_ns" :8, "tsync_order":"x" } "#;
    let m = flat::members(spaced, &names).expect("whitespace is flat");
    assert_eq!((m.duplicate, m.at[0]), (Some(0), Some((26, 27))));
    assert!(m.at[3].is_some());
    // JSON, though beyond f64's range (serde_json's `Value` refuses it, its grammar does not).
    let huge = br#"{"ts_ns":5e661822025303296}"#;
    assert_eq!(
        flat::members(huge, &names).map(|m| m.at[0]),
        Some(Some((9, 26)))
    );
    assert_eq!(
        scan_members(huge, &names).map(|m| m.at[0]),
        Ok(Some((9, 26)))
    );
    // Escapes, nested values and errors go to the full scanner.
    for other in [
        r#"{"a":"x\"y","ts_ns":1}"#,
        r#"{"ts\u005fns":1}"#,
        r#"{"a":[1],"ts_ns":1}"#,
        r#"{"a":{"ts_ns":2},"ts_ns":1}"#,
        r#"{"ts_ns":1"#,
        r#"{"ts_ns":01}"#,
        r#"{"ts_ns":1,}"#,
        r#"{"ts_ns":1} x"#,
        r#"{"ts_ns":tru}"#,
        "{\"a\":\"tab\there\",\"ts_ns\":1}",
        "[1]",
        "",
    ] {
        assert_eq!(flat::members(other.as_bytes(), &names), None, "{other}");
    }
    assert_eq!(flat::members(b"{\"a\":\"\xff\"}", &names), None);
}

/// Records as loggers and `apply` write them, with what the fast path leaves to the full
/// scanner mixed in (escapes, nesting, odd numbers), and then a few bytes changed.
fn records() -> impl Strategy<Value = Vec<u8>> {
    let key = prop_oneof![
        Just("ts_ns".to_string()),
        Just("ts_ns_lo".to_string()),
        Just("ts_ns_hi".to_string()),
        Just("tsync_order".to_string()),
        Just("ts_ns_local".to_string()),
        Just("ts_ns_h".to_string()),
        Just("tsync_ordex".to_string()),
        Just("ts\\u005fns".to_string()),
        Just("a key of more than sixty-three bytes, to be compared beyond eight...".to_string()),
        "[a-z_é]{0,12}",
    ];
    let value = prop_oneof![
        any::<i64>().prop_map(|v| v.to_string()),
        (1_700_000_000_000_000_000i64..1_800_000_000_000_000_000).prop_map(|v| v.to_string()),
        Just("-0.5e+3".to_string()),
        Just("1E9".to_string()),
        Just("null".to_string()),
        Just("true".to_string()),
        Just("false".to_string()),
        Just("[1,{\"ts_ns\":2}]".to_string()),
        Just("{}".to_string()),
        "[ -~é]{0,30}".prop_map(|t| serde_json::to_string(&t).unwrap()),
    ];
    let ws = prop_oneof![4 => Just(""), 1 => Just(" "), 1 => Just("\t ")];
    let member = (key, ws.clone(), value, ws);
    (
        prop::collection::vec(member, 0..10),
        prop::collection::vec((0usize..200, any::<u8>()), 0..2),
    )
        .prop_map(|(members, edits)| {
            let m: Vec<String> = members
                .iter()
                .map(|(k, w1, v, w2)| format!("\"{k}\"{w1}:{w2}{v}{w1}"))
                .collect();
            let mut b = format!("{{{}}}", m.join(",")).into_bytes();
            for (at, byte) in edits {
                let at = at % (b.len() + 1);
                let new = b"{}[]\",:\\ 0e-.x\x01\xc3"[byte as usize % 16];
                match byte % 3 {
                    0 if at < b.len() => {
                        b.remove(at);
                    }
                    1 => b.insert(at, new),
                    _ if at < b.len() => b[at] = new,
                    _ => {}
                }
            }
            b
        })
}

proptest! {
    /// Whatever the fast path accepts, the full scanner and serde_json accept too, and find
    /// the same members (by serde_json: the last value of each name).
    #[test]
    fn the_fast_path_agrees_with_the_full_scanner_and_serde(line in records()) {
        let names = merge_names();
        if let Some(fast) = flat::members(&line, &names) {
            prop_assert!(serde_json::from_slice::<serde::de::IgnoredAny>(&line).is_ok());
            // (A number beyond f64's range is JSON, but no `Value`: then only the above.)
            let object: serde_json::Map<String, serde_json::Value> =
                serde_json::from_slice(&line).unwrap_or_default();
            for k in (0..4).filter(|_| !object.is_empty()) {
                let name = std::str::from_utf8(names.name(k)).unwrap();
                let ours = fast.at[k]
                    .map(|(s, e)| serde_json::from_slice::<serde_json::Value>(&line[s..e]).unwrap());
                prop_assert_eq!(ours.as_ref(), object.get(name));
            }
            prop_assert_eq!(scan_members(&line, &names), Ok(fast));
        }
    }
}
