//! The summary printed when recording stops, and the warnings that go with it.
use std::{fmt, path::PathBuf};

use tsync_common::format::LostCounts;

use crate::output::{OutputStats, mib};

/// What one recording did.
pub struct Summary {
    pub path: PathBuf,
    pub seconds: f64,
    /// Events lost: in the kernel (`send`, `recv`) and on the way to the file (`disk`).
    pub lost: LostCounts,
    /// What the writer did: events written, memory, the longest write.
    pub output: OutputStats,
    /// Events written out of order because they arrived after the reorder window.
    pub late: u64,
}

impl Summary {
    pub fn events(&self) -> u64 {
        self.output.written.total()
    }

    /// One line per cause of loss: what was lost, why, and what to do.
    pub fn warnings(&self) -> Vec<String> {
        let mut lines = Vec::new();
        let kernel = self.lost.send + self.lost.recv;
        if kernel > 0 {
            lines.push(format!(
                "tsync-agent: warning: {kernel} events were lost in the kernel because the ring \
                 buffer was full (the agent did not empty it in time); try a larger --ring-size"
            ));
        }
        if self.lost.disk > 0 {
            lines.push(format!(
                "tsync-agent: warning: {} events were lost on the way to {}: its file system did \
                 not accept writes for {:.1} s (the longest write) and the {} buffer for events \
                 waiting to be written filled up; give the agent a larger --buffer-size, a \
                 faster disk, or write the trace elsewhere (a local disk, a tmpfs)",
                self.lost.disk,
                self.path.display(),
                self.output.longest_block.as_secs_f64(),
                mib(self.output.budget_bytes)
            ));
        }
        lines
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let written = self.output.written;
        writeln!(
            f,
            "tsync-agent: wrote {} events to {} in {:.1} s; {} lost",
            self.events(),
            self.path.display(),
            self.seconds,
            self.lost.total()
        )?;
        writeln!(
            f,
            "  send (net:net_dev_queue):     {:>12} events {:>10} lost",
            written.send, self.lost.send
        )?;
        writeln!(
            f,
            "  recv (net:netif_receive_skb): {:>12} events {:>10} lost",
            written.recv, self.lost.recv
        )?;
        write!(
            f,
            "  output: {} events lost to the disk; buffer peak {} of {}; longest write {:.2} s",
            self.lost.disk,
            mib(self.output.peak_bytes),
            mib(self.output.budget_bytes),
            self.output.longest_block.as_secs_f64()
        )?;
        if self.late > 0 {
            write!(
                f,
                "\n  {} event(s) arrived after the reorder window and are out of time order",
                self.late
            )?;
        }
        Ok(())
    }
}
