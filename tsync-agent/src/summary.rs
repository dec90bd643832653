//! The summary printed when recording stops.
use std::{fmt, path::PathBuf};

use tsync_common::format::LostCounts;

/// What one recording did.
pub struct Summary {
    pub path: PathBuf,
    pub seconds: f64,
    pub send_events: u64,
    pub recv_events: u64,
    pub lost: LostCounts,
    /// Events written out of order because they arrived after the reorder window.
    pub late: u64,
}

impl Summary {
    pub fn events(&self) -> u64 {
        self.send_events + self.recv_events
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
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
            self.send_events, self.lost.send
        )?;
        write!(
            f,
            "  recv (net:netif_receive_skb): {:>12} events {:>10} lost",
            self.recv_events, self.lost.recv
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
