//! The VM lab (`cargo xtask lab`): tsync on real, separate kernels with clocks of their own, and a
//! ground truth.
//!
//! Three guests (Debian's 6.1 and 6.12 kernels for amd64 and arm64, cached by [`cache`]) boot
//! under QEMU's TCG — the x86_64 ones with virtme-ng, the arm64 one from an [`initramfs`] of its
//! own ([`qemu`]) — on one multicast hub. Each runs `tsync-lab guest` ([`guest`]): an agent
//! records while the traffic generator talks TCP to the other guests, and one guest's clock is
//! slewed with `adjtimex` partway ([`clocks`]). The host serves a shared page ([`tscpage`]) through
//! which every guest measures its TSC against the host's — the ground truth ([`truth`]) — and
//! through which the guests start and stop together ([`host`]). The guests write their
//! [`report`]s; then the analyzer's library synchronizes the traces and [`checks`] compares
//! everything with the truth ([`lab`]: from the options to the verdict).
//!
//! The guest's side ([`guest`], [`clocks`], [`report`], [`tscpage`]) builds without the crate's
//! `host` feature: it is what the `tsync-lab` binary runs inside a guest.
pub mod clocks;
pub mod guest;
pub mod report;
pub mod tscpage;

#[cfg(feature = "host")]
pub mod cache;
#[cfg(feature = "host")]
pub mod checks;
#[cfg(feature = "host")]
pub mod host;
#[cfg(feature = "host")]
pub mod initramfs;
#[cfg(feature = "host")]
pub mod lab;
#[cfg(feature = "host")]
pub mod qemu;
#[cfg(feature = "host")]
pub mod truth;

#[cfg(feature = "host")]
pub use cache::{DEBIAN_PACKAGES, FOREIGN_ARCH, GuestArch};
#[cfg(feature = "host")]
pub use lab::{GuestBinaries, Lab, LabBinaries, LabOptions, SlewPlan};
