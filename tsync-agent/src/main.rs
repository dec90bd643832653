//! `tsync-agent`: records the packet digests of one node into a trace file.
fn main() {
    eprintln!("tsync-agent: not built yet");
    std::process::exit(2);
}
