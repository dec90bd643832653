use super::*;

fn raw(text: &str) -> Box<RawValue> {
    RawValue::from_string(text.to_string()).unwrap()
}

#[test]
fn times_keep_their_spelling_and_zero_is_unset() {
    let (t, s) = parse_time(&raw("\"1700000000123456789\""))
        .unwrap()
        .unwrap();
    assert_eq!(t, 1_700_000_000_123_456_789);
    let mut out = Vec::new();
    write_time(&mut out, t + 1, s).unwrap();
    assert_eq!(out, b"\"1700000000123456790\"");
    let (t, s) = parse_time(&raw("42")).unwrap().unwrap();
    out.clear();
    write_time(&mut out, t, s).unwrap();
    assert_eq!(out, b"42");
    assert!(parse_time(&raw("\"0\"")).unwrap().is_none());
    assert!(parse_time(&raw("0")).unwrap().is_none());
    for bad in [
        "-5",
        "1.5e9",
        "\"12a\"",
        "\"\"",
        "null",
        "18446744073709551615",
    ] {
        assert!(parse_time(&raw(bad)).is_err(), "{bad}");
    }
    assert!(write_time(&mut out, -1, Spelling::Number).is_err());
}

#[test]
fn attributes_are_appended_to_the_array_as_written() {
    let a = JsonAttributes::of(&[
        ("tsync.node", AttrValue::Str("n\"1")),
        ("tsync.uncertainty_ns", AttrValue::Int(-3)),
        ("tsync.outside_span", AttrValue::Bool(true)),
    ]);
    let new = r#"{"key":"tsync.node","value":{"stringValue":"n\"1"}},{"key":"tsync.uncertainty_ns","value":{"intValue":"-3"}},{"key":"tsync.outside_span","value":{"boolValue":true}}"#;
    for (before, after) in [
        ("[]".to_string(), format!("[{new}]")),
        ("[ ]".to_string(), format!("[ {new}]")),
        (
            r#"[ {"key":"a", "value":{"intValue":"1"}} ]"#.to_string(),
            format!(r#"[ {{"key":"a", "value":{{"intValue":"1"}}}} ,{new}]"#),
        ),
    ] {
        let mut out = Vec::new();
        a.append_to(&mut out, Some(&raw(&before))).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), after);
        let v: serde_json::Value = serde_json::from_str(&after).unwrap();
        assert!(v.is_array());
    }
    let mut out = Vec::new();
    a.append_to(&mut out, None).unwrap();
    assert_eq!(String::from_utf8(out).unwrap(), format!("[{new}]"));
    assert!(a.append_to(&mut Vec::new(), Some(&raw("{}"))).is_err());
}

#[test]
fn members_keep_order_and_raw_text() {
    let text = r#"{"z": 1.50, "a": {"b" : [1, 2]}, "m": "\u00e9"}"#;
    let m = Members::parse(text, "x").unwrap();
    let keys: Vec<&str> = m.0.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(keys, ["z", "a", "m"]);
    assert_eq!(m.get("z").unwrap().get(), "1.50");
    assert_eq!(m.get("a").unwrap().get(), r#"{"b" : [1, 2]}"#);
    assert_eq!(m.get("m").unwrap().get(), r#""\u00e9""#);
    assert!(Members::parse("[1]", "x").is_err());
}

#[test]
fn an_applied_span_is_refused() {
    let attrs = raw(r#"[{"key":"tsync.node","value":{"stringValue":"a"}}]"#);
    assert!(
        check_not_applied(Some(&attrs))
            .unwrap_err()
            .contains("tsync.node")
    );
    let attrs = raw(r#"[{"key":"http.method","value":{"stringValue":"GET"}}]"#);
    assert!(check_not_applied(Some(&attrs)).is_ok());
}
