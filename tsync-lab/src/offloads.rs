//! The NICs' segmentation and receive offloads (TSO, GSO, GRO), which the demo and the VM lab can
//! turn on or off: they decide how sends and receives are cut into the events the analyzer pairs.
//!
//! They are read and set with the kernel's ethtool ioctl (`SIOCETHTOOL`, the per-feature legacy
//! commands every kernel since 2.6 answers), not by running `ethtool`: the arm64 lab guest boots
//! an initramfs of static binaries and Debian's ethtool is not static, and a namespace's devices
//! are reached from a socket opened inside it ([`crate::Netns::run_in`]) without `ip netns exec`.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use anyhow::{Context, bail};

/// The `--offloads` choices.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Offloads {
    On,
    Off,
    /// As the kernel set them.
    Kernel,
}

impl Offloads {
    /// The state to give TSO, GSO and GRO, or None to leave the kernel's.
    pub fn wanted(self) -> Option<bool> {
        match self {
            Offloads::On => Some(true),
            Offloads::Off => Some(false),
            Offloads::Kernel => None,
        }
    }

    /// The choice as the command line spells it.
    pub fn name(self) -> &'static str {
        match self {
            Offloads::On => "on",
            Offloads::Off => "off",
            Offloads::Kernel => "kernel",
        }
    }
}

/// `SIOCETHTOOL` (linux/sockios.h).
const SIOCETHTOOL: u32 = 0x8946;
/// `ETHTOOL_GFLAGS` and its large-receive-offload bit (linux/ethtool.h).
const ETHTOOL_GFLAGS: u32 = 0x25;
const ETH_FLAG_LRO: u32 = 1 << 15;

/// One offload with its legacy get and set commands (linux/ethtool.h), named as `ethtool -k`
/// prints it.
struct Feature {
    name: &'static str,
    get: u32,
    set: u32,
}

/// What `--offloads` switches, in the order `ethtool -K DEV tso S gso S gro S` applies them
/// (TSO before GSO: GSO may depend on it).
const SWITCHED: [Feature; 3] = [
    Feature {
        name: "tcp-segmentation-offload",
        get: 0x1e,
        set: 0x1f,
    },
    Feature {
        name: "generic-segmentation-offload",
        get: 0x23,
        set: 0x24,
    },
    Feature {
        name: "generic-receive-offload",
        get: 0x2b,
        set: 0x2c,
    },
];

/// `struct ethtool_value`.
#[repr(C)]
struct EthtoolValue {
    cmd: u32,
    data: u32,
}

/// `struct ifreq` with its union as `ifr_data` (40 bytes on 64-bit Linux).
#[repr(C)]
struct IfReq {
    name: [u8; libc::IFNAMSIZ],
    data: *mut EthtoolValue,
    _rest: [u8; 16],
}

/// A socket to address the devices of the calling thread's network namespace.
fn control_socket() -> io::Result<OwnedFd> {
    // SAFETY: plain socket(2); the descriptor is owned from here on.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh, valid descriptor nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Runs one ethtool command with an `ethtool_value` on `dev`; returns the value's data.
fn ethtool(sock: &OwnedFd, dev: &str, cmd: u32, data: u32) -> io::Result<u32> {
    let mut name = [0u8; libc::IFNAMSIZ];
    if dev.is_empty() || dev.len() >= name.len() || dev.contains('\0') {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{dev:?} is not a device name"),
        ));
    }
    name[..dev.len()].copy_from_slice(dev.as_bytes());
    let mut value = EthtoolValue { cmd, data };
    let mut req = IfReq {
        name,
        data: &mut value,
        _rest: [0; 16],
    };
    // SAFETY: SIOCETHTOOL reads the ifreq and the ethtool_value it points to, both alive and
    // laid out as the kernel expects, and writes only into the value.
    let rc = unsafe { libc::ioctl(sock.as_raw_fd(), SIOCETHTOOL as _, &mut req) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(value.data)
}

/// Turns TSO, GSO and GRO on or off on `dev`, as `ethtool -K DEV tso S gso S gro S` does; needs
/// CAP_NET_ADMIN in the device's namespace (call it from a thread inside that namespace).
/// Returns the offloads the device cannot change and that stay as they were, not as asked
/// (virtio-net without the host's TSO cannot turn it on, for one); any other failure is an
/// error naming the device's state.
pub fn set(dev: &str, on: bool) -> anyhow::Result<Vec<&'static str>> {
    let sock = control_socket().context("cannot open a socket for the ethtool ioctl")?;
    let state = if on { "on" } else { "off" };
    let mut missing = Vec::new();
    for f in &SWITCHED {
        match ethtool(&sock, dev, f.set, u32::from(on)) {
            Ok(_) => {}
            // The device cannot change it (not offered, or fixed).
            Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => missing.push(f.name),
            Err(e) => bail!(
                "cannot turn {} {state} on {dev} (the ethtool ioctl: {e}); it has {}",
                f.name,
                describe(enabled(dev))
            ),
        }
    }
    let now = enabled(dev).with_context(|| format!("cannot read {dev}'s offloads back"))?;
    let stuck: Vec<&str> = SWITCHED
        .iter()
        .map(|f| f.name)
        .filter(|n| now.contains(n) != on && !missing.contains(n))
        .collect();
    if !stuck.is_empty() {
        bail!(
            "{dev}: {} did not turn {state} (the kernel keeps a feature another one needs); it \
             has {}",
            stuck.join(", "),
            describe(Ok(now))
        );
    }
    Ok(missing
        .into_iter()
        .filter(|n| now.contains(n) != on)
        .collect())
}

/// The segmentation and receive offloads that are on for `dev` (TSO, GSO, GRO, LRO), named as
/// `ethtool -k` names them.
pub fn enabled(dev: &str) -> io::Result<Vec<&'static str>> {
    let sock = control_socket()?;
    let mut on = Vec::new();
    for f in &SWITCHED {
        match ethtool(&sock, dev, f.get, 0) {
            Ok(0) => {}
            Ok(_) => on.push(f.name),
            Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => {}
            Err(e) => return Err(e),
        }
    }
    match ethtool(&sock, dev, ETHTOOL_GFLAGS, 0) {
        Ok(flags) if flags & ETH_FLAG_LRO != 0 => on.push("large-receive-offload"),
        Ok(_) => {}
        Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => {}
        Err(e) => return Err(e),
    }
    Ok(on)
}

/// A device's offloads for a message: the list, "none on", or why they are unknown.
fn describe(state: io::Result<Vec<&'static str>>) -> String {
    match state {
        Ok(v) if v.is_empty() => "none on".into(),
        Ok(v) => format!("{} on", v.join(", ")),
        Err(e) => format!("unknown offloads ({e})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_request_is_laid_out_as_the_kernel_reads_it() {
        // struct ifreq is 40 bytes on 64-bit Linux; ifr_data follows the 16-byte name.
        assert_eq!(std::mem::size_of::<IfReq>(), 16 + 24);
        assert_eq!(std::mem::offset_of!(IfReq, data), 16);
        assert_eq!(std::mem::size_of::<EthtoolValue>(), 8);
    }

    #[test]
    fn a_name_that_is_no_device_is_refused_before_the_kernel() {
        let sock = control_socket().unwrap();
        for bad in ["", "a-name-longer-than-15", "eth\0"] {
            let e = ethtool(&sock, bad, SWITCHED[0].get, 0).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{bad:?}");
        }
    }

    #[test]
    fn loopback_reports_its_offloads() {
        // Every namespace has `lo`, whose offloads are fixed (TSO and GSO on, GRO on as for
        // every device, no LRO); reading them needs no privilege.
        let on = enabled("lo").expect("lo answers the ethtool ioctl");
        assert_eq!(
            on,
            [
                "tcp-segmentation-offload",
                "generic-segmentation-offload",
                "generic-receive-offload"
            ]
        );
        let missing = enabled("no-such-dev0").unwrap_err();
        assert_eq!(missing.raw_os_error(), Some(libc::ENODEV), "{missing}");
    }
}
