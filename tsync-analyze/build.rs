//! Tells the compiler the git commit and target triple for `--version`.
#[path = "../build-support/build_info.rs"]
mod build_info;

fn main() {
    build_info::emit();
}
