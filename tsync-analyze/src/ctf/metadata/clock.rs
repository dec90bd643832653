//! The `clock` blocks of a TSDL text with where they are, for rewriting one in place
//! (`apply --format ctf`): read from the tokens alone, so that a metadata text whose types this
//! reader would refuse can still get its clock rewritten.

use super::ast::{Attr, Value};
use super::parser::blocks;

/// A clock class of the metadata: where its block is and its attributes.
#[derive(Clone, Debug, PartialEq)]
pub struct ClockClass {
    /// Byte range of the whole `clock { ... };` declaration in the text.
    pub range: (usize, usize),
    /// `name` (unquoted).
    pub name: String,
    /// `freq` (Hz; 10⁹ when absent, as CTF says).
    pub freq: u64,
    /// `offset_s` (s).
    pub offset_s: i64,
    /// `offset` (cycles).
    pub offset: i64,
    /// The other attributes, as written (`uuid = "…"`, `description = "…"`, …).
    pub others: Vec<String>,
}

/// The clock classes declared at the top level of `text`.
pub fn clock_classes(text: &str) -> Result<Vec<ClockClass>, String> {
    let found = blocks(text, "clock").map_err(|e| e.to_string())?;
    found
        .into_iter()
        .map(|(attrs, range)| class(text, &attrs, range))
        .collect()
}

fn class(text: &str, attrs: &[Attr], range: (usize, usize)) -> Result<ClockClass, String> {
    let mut c = ClockClass {
        range,
        name: String::new(),
        freq: 1_000_000_000,
        offset_s: 0,
        offset: 0,
        others: Vec::new(),
    };
    let int = |a: &Attr| match a.value {
        Value::Int(v) => Ok(v),
        _ => Err(format!(
            "clock `{}` is `{}`, not an integer",
            a.key,
            &text[a.range.0..a.range.1]
        )),
    };
    for a in attrs {
        match (a.key.as_str(), &a.value) {
            ("name", Value::Str(s) | Value::Path(s)) => c.name = s.clone(),
            ("freq", _) => {
                c.freq = u64::try_from(int(a)?)
                    .ok()
                    .filter(|&f| f > 0)
                    .ok_or_else(|| format!("clock `freq` is {}", &text[a.range.0..a.range.1]))?
            }
            ("offset_s", _) => {
                c.offset_s = i64::try_from(int(a)?).map_err(|_| "clock `offset_s` out of range")?
            }
            ("offset", _) => {
                c.offset = i64::try_from(int(a)?).map_err(|_| "clock `offset` out of range")?
            }
            _ => c.others.push(text[a.range.0..a.range.1].to_string()),
        }
    }
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    const LTTNG: &str = "/* CTF 1.8 */\n\ntrace {\n\tmajor = 1;\n};\n\nclock {\n\tname = \"monotonic\";\n\tuuid = \"fe86b8a5-851c-4323-bd58-7c77bca6e697\";\n\tdescription = \"Monotonic Clock\";\n\tfreq = 1000000000; /* Frequency, in Hz */\n\t/* clock value offset from Epoch is: offset * (1/freq) */\n\toffset = 1795441370960180768;\n};\n\ntypealias integer {\n\tsize = 27; align = 1; signed = false;\n\tmap = clock.monotonic.value;\n} := uint27_clock_monotonic_t;\n";

    #[test]
    fn finds_lttngs_clock_and_nothing_in_comments() {
        let classes = clock_classes(LTTNG).unwrap();
        assert_eq!(classes.len(), 1);
        let c = &classes[0];
        assert_eq!(c.name, "monotonic");
        assert_eq!(c.freq, 1_000_000_000);
        assert_eq!(c.offset, 1_795_441_370_960_180_768);
        assert_eq!(c.offset_s, 0);
        assert_eq!(c.others.len(), 2, "{:?}", c.others);
        assert!(LTTNG[c.range.0..c.range.1].starts_with("clock {"));
        assert!(LTTNG[c.range.0..c.range.1].ends_with("};"));
        let commented = format!("/* clock {{ name = x; }}; */\n{LTTNG}");
        assert_eq!(clock_classes(&commented).unwrap().len(), 1);
    }
}
