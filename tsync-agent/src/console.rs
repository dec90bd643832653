//! Printing that never panics: `println!` panics when stdout is a closed pipe (`| head`), and a
//! recording must still end cleanly with its file complete.
use std::io::Write as _;

/// Writes a line to stdout; a closed or full stdout is ignored (the trace file is what matters).
pub fn out(line: &str) {
    let _ = writeln!(std::io::stdout().lock(), "{line}");
}

/// Writes a line to stderr, ignoring errors for the same reason.
pub fn err(line: &str) {
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}
