//! What the trace header says about the node: names, boot, kernel, clocksource, interfaces.
use std::{collections::BTreeMap, ffi::CStr, fs, net::IpAddr, os::unix::fs::MetadataExt};

use tsync_common::format::Interface;

/// A one-line /proc or /sys file, trimmed; empty if unreadable (the header field is informative).
fn read_line(path: &str) -> String {
    fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// The node's hostname (of the agent's UTS namespace).
pub fn hostname() -> String {
    read_line("/proc/sys/kernel/hostname")
}

/// `/proc/sys/kernel/random/boot_id`: monotonic times are comparable only within one boot.
pub fn boot_id() -> String {
    read_line("/proc/sys/kernel/random/boot_id")
}

/// `uname -r`.
pub fn kernel_release() -> String {
    read_line("/proc/sys/kernel/osrelease")
}

/// The major and minor version of a kernel release (`6.1.0-28-amd64` → (6, 1)).
pub fn kernel_version(release: &str) -> Option<(u32, u32)> {
    let mut parts = release
        .split(|c: char| !c.is_ascii_digit())
        .map(|p| p.parse::<u32>().ok());
    Some((parts.next()??, parts.next()??))
}

/// The current clocksource (`tsc`, `kvm-clock`, …).
pub fn clocksource() -> String {
    read_line("/sys/devices/system/clocksource/clocksource0/current_clocksource")
}

/// The inode number of the agent's network namespace (what the kernel programs filter on).
pub fn netns_inode() -> std::io::Result<u64> {
    fs::metadata("/proc/self/ns/net").map(|m| m.ino())
}

/// Number of leading one bits of a netmask.
fn prefix_len(mask: &[u8]) -> u32 {
    mask.iter().map(|b| b.count_ones()).sum()
}

/// The interfaces of the calling thread's network namespace, with MAC and addresses
/// (`getifaddrs`).
pub fn interfaces() -> std::io::Result<Vec<Interface>> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `head` with a list we free below.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut by_name: BTreeMap<String, Interface> = BTreeMap::new();
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list getifaddrs returned, valid until freeifaddrs.
        let ifa = unsafe { &*cur };
        cur = ifa.ifa_next;
        // SAFETY: ifa_name is a NUL-terminated string.
        let name = unsafe { CStr::from_ptr(ifa.ifa_name) }
            .to_string_lossy()
            .into_owned();
        let entry = by_name.entry(name.clone()).or_insert_with(|| Interface {
            // SAFETY: ifa_name is a valid C string.
            ifindex: unsafe { libc::if_nametoindex(ifa.ifa_name) },
            name,
            mac: None,
            addresses: Vec::new(),
            // Filled in by the caller, which knows which namespace this thread is in.
            netns_inode: 0,
        });
        if ifa.ifa_addr.is_null() {
            continue;
        }
        // SAFETY: ifa_addr is non-null and at least a sockaddr; the family says which one.
        let family = i32::from(unsafe { (*ifa.ifa_addr).sa_family });
        match family {
            libc::AF_PACKET => {
                // SAFETY: AF_PACKET entries carry a sockaddr_ll.
                let ll = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_ll) };
                if ll.sll_halen == 6 {
                    let mut mac = [0u8; 6];
                    mac.copy_from_slice(&ll.sll_addr[..6]);
                    entry.mac = Some(mac);
                }
            }
            libc::AF_INET | libc::AF_INET6 => {
                // SAFETY: the family says which sockaddr the pointers hold; the mask has the same.
                let (addr, mask) = unsafe { ip_and_mask(ifa, family) };
                entry.addresses.push(format!("{addr}/{mask}"));
            }
            _ => {}
        }
    }
    // SAFETY: `head` came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(head) };
    let mut list: Vec<Interface> = by_name.into_values().collect();
    list.sort_by_key(|i| i.ifindex);
    Ok(list)
}

/// The address and prefix length of an AF_INET/AF_INET6 `ifaddrs` entry.
///
/// # Safety
/// `ifa.ifa_addr` must be a non-null sockaddr of `family`; `ifa_netmask` null or of the same family.
unsafe fn ip_and_mask(ifa: &libc::ifaddrs, family: i32) -> (IpAddr, u32) {
    if family == libc::AF_INET {
        // SAFETY: per the contract above.
        let a = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in) };
        let ip = IpAddr::from(a.sin_addr.s_addr.to_ne_bytes());
        let mask = if ifa.ifa_netmask.is_null() {
            32
        } else {
            // SAFETY: per the contract above.
            let m = unsafe { &*(ifa.ifa_netmask as *const libc::sockaddr_in) };
            prefix_len(&m.sin_addr.s_addr.to_ne_bytes())
        };
        (ip, mask)
    } else {
        // SAFETY: per the contract above.
        let a = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in6) };
        let ip = IpAddr::from(a.sin6_addr.s6_addr);
        let mask = if ifa.ifa_netmask.is_null() {
            128
        } else {
            // SAFETY: per the contract above.
            let m = unsafe { &*(ifa.ifa_netmask as *const libc::sockaddr_in6) };
            prefix_len(&m.sin6_addr.s6_addr)
        };
        (ip, mask)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_is_listed_with_its_address() {
        let list = interfaces().unwrap();
        let lo = list
            .iter()
            .find(|i| i.name == "lo")
            .expect("every network namespace has lo");
        assert_eq!(lo.ifindex, 1);
        // lo is up with 127.0.0.1/8 in the initial namespace of any normal machine.
        if !lo.addresses.is_empty() {
            assert!(lo.addresses.iter().any(|a| a == "127.0.0.1/8"), "{lo:?}");
        }
    }

    #[test]
    fn node_facts_are_read() {
        assert_eq!(boot_id().len(), 36);
        assert!(!kernel_release().is_empty());
        assert!(netns_inode().unwrap() > 0);
    }

    #[test]
    fn prefix_lengths() {
        assert_eq!(prefix_len(&[255, 255, 255, 0]), 24);
        assert_eq!(prefix_len(&[0; 16]), 0);
    }
}
