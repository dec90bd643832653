use super::*;

/// A length-delimited field.
fn delimited(tag: u32, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    write_delimited(&mut out, tag, payload);
    out
}

#[test]
fn fields_are_cut_as_they_are_on_the_wire() {
    // A fixed64 (7), a string (5), a varint (6), a group (20: a varint inside), a fixed32 (16).
    let mut msg = vec![0x39];
    msg.extend_from_slice(&42u64.to_le_bytes());
    msg.extend_from_slice(&delimited(5, b"op"));
    msg.extend_from_slice(&[0x30, 0x96, 0x01]);
    msg.extend_from_slice(&[0xa3, 0x01, 0x08, 0x01, 0xa4, 0x01]);
    msg.extend_from_slice(&[0x85, 0x01, 1, 2, 3, 4]);
    let fields: Vec<Field> = Fields(&msg).collect::<Result<_, _>>().unwrap();
    let tags: Vec<u32> = fields.iter().map(|f| f.tag).collect();
    assert_eq!(tags, [7, 5, 6, 20, 16]);
    assert_eq!(fields[0].fixed64("start").unwrap(), 42);
    assert_eq!(fields[1].payload("name").unwrap(), b"op");
    assert_eq!(fields[2].value, [0x96, 0x01]);
    assert_eq!(fields[3].bytes, [0xa3, 0x01, 0x08, 0x01, 0xa4, 0x01]);
    assert_eq!(fields[4].bytes.len(), 6);
    assert_eq!(
        fields.iter().map(|f| f.bytes).collect::<Vec<_>>().concat(),
        msg
    );
    assert!(
        fields[1]
            .fixed64("`start_time_unix_nano`")
            .unwrap_err()
            .contains(
                "`start_time_unix_nano`, field 5, has wire type LengthDelimited, not SixtyFourBit"
            )
    );
    // A length past the end of its message, a key that is no key: an error, then nothing.
    let bad = [0x2a, 9, b'x'];
    let mut it = Fields(&bad);
    assert!(
        it.next()
            .unwrap()
            .unwrap_err()
            .contains("runs past the end")
    );
    assert!(it.next().is_none());
    assert!(Fields(&[0x07]).next().unwrap().is_err());
}

#[test]
fn a_grown_field_gets_a_new_length_and_an_unchanged_one_keeps_its_bytes() {
    // A length written in two bytes where one would do (a non-minimal varint): kept while the
    // payload keeps its length, re-encoded once it grows.
    let field_bytes = [0x12, 0x83, 0x00, 1, 2, 3];
    let f = Field::parse(&field_bytes).unwrap();
    assert_eq!(f.payload("x").unwrap(), [1, 2, 3]);
    let mut out = vec![9];
    rewrite_field(&mut out, &f, "x", |p, out| {
        out.extend(p.iter().map(|b| b + 10));
        Ok(())
    })
    .unwrap();
    assert_eq!(out, [9, 0x12, 0x83, 0x00, 11, 12, 13]);
    let mut out = vec![9];
    rewrite_field(&mut out, &f, "x", |p, out| {
        out.extend_from_slice(p);
        out.extend_from_slice(&[0; 200]);
        Ok(())
    })
    .unwrap();
    assert_eq!(out[..4], [9, 0x12, 0xcb, 0x01]);
    assert_eq!(out[4..7], [1, 2, 3]);
    assert_eq!(out.len(), 4 + 203);
    // A field that is no message: named.
    let varint = [0x10, 1];
    let f = Field::parse(&varint).unwrap();
    let err = rewrite_field(&mut Vec::new(), &f, "`scope_spans`", |_, _| Ok(()));
    assert!(matches!(err, Err(LineFailure::Text(t)) if t.contains("`scope_spans`, field 2")));
}

#[test]
fn attributes_are_key_values_of_any_values() {
    let mut out = Vec::new();
    append_attributes(
        &mut out,
        SPAN_ATTRIBUTES,
        &[
            ("tsync.node", AttrValue::Str("n1")),
            ("tsync.uncertainty_ns", AttrValue::Int(-3)),
            ("tsync.outside_span", AttrValue::Bool(true)),
        ],
    );
    let kvs: Vec<Field> = Fields(&out).collect::<Result<_, _>>().unwrap();
    assert!(kvs.iter().all(|f| f.tag == SPAN_ATTRIBUTES));
    let decoded: Vec<(Vec<u8>, u32, Vec<u8>)> = kvs
        .iter()
        .map(|kv| {
            let parts: Vec<Field> = Fields(kv.payload("kv").unwrap())
                .collect::<Result<_, _>>()
                .unwrap();
            assert_eq!((parts[0].tag, parts[1].tag), (KEY, VALUE));
            let any = Field::parse(parts[1].payload("value").unwrap()).unwrap();
            (parts[0].value.to_vec(), any.tag, any.value.to_vec())
        })
        .collect();
    assert_eq!(
        decoded,
        [
            (b"tsync.node".to_vec(), STRING_VALUE, b"n1".to_vec()),
            // -3 as an int64 varint: ten bytes.
            (
                b"tsync.uncertainty_ns".to_vec(),
                INT_VALUE,
                vec![0xfd, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]
            ),
            (b"tsync.outside_span".to_vec(), BOOL_VALUE, vec![1]),
        ]
    );
    // What was appended is refused when applied again.
    assert!(
        check_attribute(kvs[0].payload("kv").unwrap())
            .unwrap_err()
            .contains("already has the attribute `tsync.node`")
    );
    let user = [
        delimited(KEY, b"http.method"),
        delimited(VALUE, &delimited(1, b"GET")),
    ]
    .concat();
    assert!(check_attribute(&user).is_ok());
}

#[test]
fn times_are_rewritten_in_place() {
    let mut field_bytes = vec![0x41];
    field_bytes.extend_from_slice(&1_700_000_000_000_000_000u64.to_le_bytes());
    let f = Field::parse(&field_bytes).unwrap();
    assert_eq!(time_of(&f, "end").unwrap(), Some(1_700_000_000_000_000_000));
    let mut out = Vec::new();
    write_time(&mut out, &f, 1_700_000_000_000_000_123).unwrap();
    assert_eq!(out[0], 0x41);
    assert_eq!(out[1..], 1_700_000_000_000_000_123u64.to_le_bytes());
    assert!(
        write_time(&mut out, &f, -1)
            .unwrap_err()
            .contains("before 1970")
    );
    let zero = [0x41, 0, 0, 0, 0, 0, 0, 0, 0];
    assert_eq!(time_of(&Field::parse(&zero).unwrap(), "end").unwrap(), None);
}
