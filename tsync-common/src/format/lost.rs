//! Lost-event counters and the footer, in the layout of each format version.

use serde::{Deserialize, Serialize};

use super::FormatError;

/// Events lost while recording, cumulative since the start: those the kernel could not put into
/// the ring buffer (`send`, `recv`) and those the agent dropped because the output did not take
/// them fast enough (`disk`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct LostCounts {
    /// Send events lost: ring buffer full or headers unreadable (per CPU below), plus the runs
    /// the kernel skipped because the program was already running on that CPU (no CPU known).
    pub send: u64,
    /// Receive events lost, counted like `send`.
    pub recv: u64,
    /// Per CPU: `[send, recv]` (the in-kernel counters only).
    pub per_cpu: Vec<[u64; 2]>,
    /// Events the agent took from the ring buffer but dropped because the output did not accept
    /// writes fast enough (its memory budget for pending writes was full). Version 3 on; 0 when
    /// read from older files, whose agents blocked instead.
    pub disk: u64,
}

impl LostCounts {
    /// All lost events, in the kernel and on the way to disk (saturating: the counts of a corrupt
    /// file can be anything).
    pub fn total(&self) -> u64 {
        self.send
            .saturating_add(self.recv)
            .saturating_add(self.disk)
    }

    /// Events the kernel lost (ring buffer full, unreadable headers, skipped runs).
    pub fn kernel(&self) -> u64 {
        self.send.saturating_add(self.recv)
    }
}

/// [`LostCounts`] as versions 1 and 2 store them (no `disk`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub(super) struct LostCountsV2 {
    send: u64,
    recv: u64,
    per_cpu: Vec<[u64; 2]>,
}

impl From<LostCountsV2> for LostCounts {
    fn from(old: LostCountsV2) -> Self {
        LostCounts {
            send: old.send,
            recv: old.recv,
            per_cpu: old.per_cpu,
            disk: 0,
        }
    }
}

impl TryFrom<&LostCounts> for LostCountsV2 {
    type Error = FormatError;

    /// Refuses disk losses, which a version 2 file cannot hold: dropping them would be silent.
    fn try_from(lost: &LostCounts) -> Result<Self, FormatError> {
        if lost.disk != 0 {
            return Err(FormatError::Encode(format!(
                "a version 2 file cannot record the {} event(s) dropped on the way to disk",
                lost.disk
            )));
        }
        Ok(LostCountsV2 {
            send: lost.send,
            recv: lost.recv,
            per_cpu: lost.per_cpu.clone(),
        })
    }
}

/// Written last: the totals, so a reader can tell a complete file from one cut short.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct Footer {
    pub events: u64,
    pub send_events: u64,
    pub recv_events: u64,
    pub lost: LostCounts,
    pub end_realtime_ns: i64,
    pub end_monotonic_ns: u64,
}

/// [`Footer`] as versions 1 and 2 store it (their [`LostCountsV2`]).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub(super) struct FooterV2 {
    events: u64,
    send_events: u64,
    recv_events: u64,
    lost: LostCountsV2,
    end_realtime_ns: i64,
    end_monotonic_ns: u64,
}

impl From<FooterV2> for Footer {
    fn from(old: FooterV2) -> Self {
        Footer {
            events: old.events,
            send_events: old.send_events,
            recv_events: old.recv_events,
            lost: old.lost.into(),
            end_realtime_ns: old.end_realtime_ns,
            end_monotonic_ns: old.end_monotonic_ns,
        }
    }
}

impl TryFrom<&Footer> for FooterV2 {
    type Error = FormatError;

    fn try_from(footer: &Footer) -> Result<Self, FormatError> {
        Ok(FooterV2 {
            events: footer.events,
            send_events: footer.send_events,
            recv_events: footer.recv_events,
            lost: (&footer.lost).try_into()?,
            end_realtime_ns: footer.end_realtime_ns,
            end_monotonic_ns: footer.end_monotonic_ns,
        })
    }
}
