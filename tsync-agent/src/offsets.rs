//! The kernel struct field offsets the eBPF programs need, resolved from the running kernel's BTF.
use tsync_common::names::global;

use crate::btf::{Btf, BtfError, Field};

/// Byte offsets passed to the programs as globals (names as in `tsync-ebpf`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelOffsets {
    pub skb_dev: u32,
    pub skb_protocol: u32,
    pub skb_network_header: u32,
    pub skb_head: u32,
    pub skb_data: u32,
    /// `sk_buff.tail`, a 4-byte offset from `head` on 64-bit kernels (`sk_buff_data_t`).
    pub skb_tail: u32,
    pub skb_len: u32,
    pub skb_data_len: u32,
    pub dev_ifindex: u32,
    pub dev_nd_net: u32,
    pub net_ns_inum: u32,
}

/// A member the programs read with a fixed width: check the kernel agrees on that width.
fn sized(btf: &Btf, strukt: &str, path: &str, size: u32) -> Result<u32, BtfError> {
    let Field { offset, size: got } = btf.member(strukt, path)?;
    if got != size {
        return Err(BtfError::Malformed(format!(
            "kernel {strukt}.{path} is {got} bytes, tsync expects {size}"
        )));
    }
    Ok(offset)
}

impl KernelOffsets {
    /// Looks every field up; fails naming the first one this kernel lacks.
    pub fn resolve(btf: &Btf) -> Result<Self, BtfError> {
        Ok(Self {
            skb_dev: sized(btf, "sk_buff", "dev", 8)?,
            skb_protocol: sized(btf, "sk_buff", "protocol", 2)?,
            skb_network_header: sized(btf, "sk_buff", "network_header", 2)?,
            skb_head: sized(btf, "sk_buff", "head", 8)?,
            skb_data: sized(btf, "sk_buff", "data", 8)?,
            skb_tail: sized(btf, "sk_buff", "tail", 4)?,
            skb_len: sized(btf, "sk_buff", "len", 4)?,
            skb_data_len: sized(btf, "sk_buff", "data_len", 4)?,
            dev_ifindex: sized(btf, "net_device", "ifindex", 4)?,
            dev_nd_net: sized(btf, "net_device", "nd_net.net", 8)?,
            net_ns_inum: sized(btf, "net", "ns.inum", 4)?,
        })
    }

    /// (global name, value) pairs, in the names the programs declare.
    pub fn globals(&self) -> [(&'static str, &u32); 11] {
        [
            (global::SKB_DEV, &self.skb_dev),
            (global::SKB_PROTOCOL, &self.skb_protocol),
            (global::SKB_NETWORK_HEADER, &self.skb_network_header),
            (global::SKB_HEAD, &self.skb_head),
            (global::SKB_DATA, &self.skb_data),
            (global::SKB_TAIL, &self.skb_tail),
            (global::SKB_LEN, &self.skb_len),
            (global::SKB_DATA_LEN, &self.skb_data_len),
            (global::DEV_IFINDEX, &self.dev_ifindex),
            (global::DEV_ND_NET, &self.dev_nd_net),
            (global::NET_NS_INUM, &self.net_ns_inum),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolves_on_the_running_kernel() {
        let btf = Btf::from_kernel().unwrap();
        let o = KernelOffsets::resolve(&btf).unwrap();
        // sk_buff starts with next/prev (or an rb_node) before `dev`.
        assert!(o.skb_dev >= 16);
        assert_eq!(o.skb_data, o.skb_head + 8);
        assert_eq!(o.skb_network_header, o.skb_protocol + 4);
        // `tail` and `end` sit between the header offsets and `head`.
        assert!(o.skb_tail > o.skb_network_header && o.skb_tail < o.skb_head);
        // `len` then `data_len`, both before the header offsets.
        assert_eq!(o.skb_data_len, o.skb_len + 4);
        assert!(o.net_ns_inum > 0);
    }
}
