//! `tsync-analyze`: brings the traces of several nodes onto one timebase.
fn main() {
    eprintln!("tsync-analyze: not built yet");
    std::process::exit(2);
}
