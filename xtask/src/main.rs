//! `cargo xtask`: setup, demo and benchmarks.
fn main() {
    eprintln!("xtask: nothing yet");
}
