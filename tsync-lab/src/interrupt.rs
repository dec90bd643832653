//! Ctrl-C (and SIGTERM) as a request to stop: the demo and the VM lab must survive the signal to
//! tear down what they started (namespaces, agents, guests) and then fail.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

/// Set by the Ctrl-C handler of [`catch`].
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// Makes Ctrl-C (and SIGTERM) set [`interrupted`] instead of ending the process, so that a run can
/// tear down what it started and fail. Installed once per process, whichever run asks first
/// (`cargo xtask test` runs several).
pub fn catch() -> anyhow::Result<()> {
    static INSTALLED: OnceLock<Result<(), String>> = OnceLock::new();
    INSTALLED
        .get_or_init(|| {
            ctrlc::set_handler(|| {
                INTERRUPTED.store(true, Ordering::SeqCst);
                eprintln!("interrupted: stopping and cleaning up");
            })
            .map_err(|e| e.to_string())
        })
        .clone()
        .map_err(|e| anyhow::anyhow!("cannot install the Ctrl-C handler: {e}"))
}

/// Whether Ctrl-C was pressed since [`catch`].
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}
