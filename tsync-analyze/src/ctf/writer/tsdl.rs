//! The metadata the writer declares: an LTTng-modules 2.10 kernel trace's header types and
//! the event classes it writes, with the fields as lttng-modules 2.10 declares them
//! (`net_dev_queue` and `net_if_receive_skb` with their `network_header` variant,
//! `sched_switch`, `syscall_entry_select`). The reader's tests check that these declarations
//! parse to the very types of the LTTng 2.10 metadata in `shared/external`.

/// Event ids, as in LTTng 2.10's kernel metadata.
pub const NET_DEV_QUEUE: u32 = 1263;
/// `net_if_receive_skb`'s id.
pub const NET_IF_RECEIVE_SKB: u32 = 1264;
/// `sched_switch`'s id.
pub const SCHED_SWITCH: u32 = 1295;
/// `syscall_entry_select`'s id: below 31, so its events take the compact header.
pub const SYSCALL_ENTRY_SELECT: u32 = 26;

const PRELUDE: &str = r##"/* CTF 1.8 */

typealias integer { size = 8; align = 8; signed = false; } := uint8_t;
typealias integer { size = 16; align = 8; signed = false; } := uint16_t;
typealias integer { size = 32; align = 8; signed = false; } := uint32_t;
typealias integer { size = 64; align = 8; signed = false; } := uint64_t;
typealias integer { size = 64; align = 8; signed = false; } := unsigned long;
typealias integer { size = 5; align = 1; signed = false; } := uint5_t;
typealias integer { size = 27; align = 1; signed = false; } := uint27_t;

trace {
	major = 1;
	minor = 8;
	uuid = "@UUID@";
	byte_order = le;
	packet.header := struct {
		uint32_t magic;
		uint8_t  uuid[16];
		uint32_t stream_id;
		uint64_t stream_instance_id;
	};
};

env {
	hostname = "@HOST@";
	domain = "kernel";
	sysname = "Linux";
	kernel_release = "4.11.0-10-generic";
	kernel_version = "#15-Ubuntu SMP Thu Jun 29 15:03:41 UTC 2017";
	tracer_name = "lttng-modules";
	tracer_major = 2;
	tracer_minor = 10;
	tracer_patchlevel = 0;
};

clock {
	name = "monotonic";
	uuid = "@CLOCK_UUID@";
	description = "Monotonic Clock";
	freq = 1000000000; /* Frequency, in Hz */
	/* clock value offset from Epoch is: offset * (1/freq) */
	offset = @OFFSET@;
};

typealias integer {
	size = 27; align = 1; signed = false;
	map = clock.monotonic.value;
} := uint27_clock_monotonic_t;

typealias integer {
	size = 32; align = 8; signed = false;
	map = clock.monotonic.value;
} := uint32_clock_monotonic_t;

typealias integer {
	size = 64; align = 8; signed = false;
	map = clock.monotonic.value;
} := uint64_clock_monotonic_t;

struct packet_context {
	uint64_clock_monotonic_t timestamp_begin;
	uint64_clock_monotonic_t timestamp_end;
	uint64_t content_size;
	uint64_t packet_size;
	uint64_t packet_seq_num;
	unsigned long events_discarded;
	uint32_t cpu_id;
};

struct event_header_compact {
	enum : uint5_t { compact = 0 ... 30, extended = 31 } id;
	variant <id> {
		struct {
			uint27_clock_monotonic_t timestamp;
		} compact;
		struct {
			uint32_t id;
			uint64_clock_monotonic_t timestamp;
		} extended;
	} v;
} align(8);

stream {
	id = 0;
	event.header := struct event_header_compact;
	packet.context := struct packet_context;
};
"##;

/// Unsigned integer fields of the declarations below, by size and base: `be` for network
/// order.
fn int(size: u32, align: u32, signed: bool, base: u32, be: bool, encoding: &str) -> String {
    format!(
        "integer {{ size = {size}; align = {align}; signed = {}; encoding = {encoding}; base = \
         {base};{} }}",
        u8::from(signed),
        if be { " byte_order = be;" } else { "" }
    )
}

/// The TCP header's fields, as the `_tcp` option of both IP versions declares them.
fn tcp() -> String {
    let f = |size, align, base, name: &str| {
        format!(
            "\t\t\t\t\t\t{} {name};\n",
            int(size, align, false, base, true, "none")
        )
    };
    format!(
        "\t\t\t\t\tstruct {{\n{}{}{}{}{}{}{}{}{}{}\t\t\t\t\t}}_tcp;\n",
        f(16, 8, 10, "_source_port"),
        f(16, 8, 10, "_dest_port"),
        f(32, 8, 10, "_seq"),
        f(32, 8, 10, "_ack_seq"),
        f(4, 4, 10, "_data_offset"),
        f(3, 1, 10, "_reserved"),
        f(9, 1, 16, "_flags"),
        f(16, 8, 10, "_window_size"),
        f(16, 8, 16, "_checksum"),
        f(16, 8, 10, "_urg_ptr"),
    )
}

/// The protocol enum of IPv4 (`_protocol`) and IPv6 (`_nexthdr`).
fn protocol_enum(name: &str) -> String {
    format!(
        "\t\t\t\tenum : {} {{\n\t\t\t\t\t\"_unknown\" = 0 ... 5,\n\t\t\t\t\t\"_tcp\" = 6,\n\
         \t\t\t\t\t\"_unknown\" = 7 ... 255,\n\t\t\t\t}} {name};\n",
        int(8, 8, false, 10, true, "none")
    )
}

/// The end of both IP headers: the addresses (each after a byte-alignment padding) and the
/// transport header, a variant on the protocol field `tag`.
fn tail(saddr: String, daddr: String, tag: &str) -> String {
    let pad = |name: &str| format!("\t\t\t\tstruct {{ }} align(8) {name};\n");
    format!(
        "{}{saddr}{}{daddr}\t\t\t\tvariant <{tag}> {{\n\t\t\t\t\tstruct {{\n\t\t\t\t\t}}_unknown;\n{}\
         \t\t\t\t}}_transport_header;\n",
        pad("_saddr_padding"),
        pad("_daddr_padding"),
        tcp()
    )
}

/// The fields of `net_dev_queue` and `net_if_receive_skb`.
fn network_fields() -> String {
    let b = |size, align, base, name: &str| {
        format!(
            "\t\t\t\t{} {name};\n",
            int(size, align, false, base, true, "none")
        )
    };
    let pad = |name: &str| format!("\t\t\t\tstruct {{ }} align(8) {name};\n");
    let ipv4 = [
        b(4, 4, 10, "_version"),
        b(4, 4, 10, "_ihl"),
        b(8, 8, 10, "_tos"),
        b(16, 8, 10, "_tot_len"),
        b(16, 8, 16, "_id"),
        b(16, 8, 10, "_frag_off"),
        b(8, 8, 10, "_ttl"),
        protocol_enum("_protocol"),
        b(16, 8, 16, "_checksum"),
        tail(
            b(8, 8, 10, "_saddr[4]"),
            b(8, 8, 10, "_daddr[4]"),
            "_protocol",
        ),
    ]
    .concat();
    let ipv6 = [
        b(4, 4, 10, "_version"),
        b(4, 4, 10, "_prio"),
        pad("_flow_lbl_padding"),
        b(8, 8, 16, "_flow_lbl[3]"),
        b(16, 8, 10, "_payload_len"),
        protocol_enum("_nexthdr"),
        b(8, 8, 10, "_hop_limit"),
        tail(
            b(16, 8, 16, "_saddr[8]"),
            b(16, 8, 16, "_daddr[8]"),
            "_nexthdr",
        ),
    ]
    .concat();
    format!(
        "\t\t{} _skbaddr;\n\t\t{} _len;\n\t\tstring _name;\n\
         \t\tenum : {} {{\n\t\t\t\"_unknown\" = 0,\n\t\t\t\"_ipv4\" = 1,\n\t\t\t\"_ipv6\" = 2,\n\t\t}} _network_header_type;\n\
         \t\tvariant <_network_header_type> {{\n\t\t\tstruct {{\n\t\t\t}}_unknown;\n\
         \t\t\tstruct {{\n{ipv4}\t\t\t}}_ipv4;\n\t\t\tstruct {{\n{ipv6}\t\t\t}}_ipv6;\n\t\t}}_network_header;\n",
        int(64, 8, false, 16, false, "none"),
        int(32, 8, false, 10, false, "none"),
        int(8, 8, false, 10, false, "none"),
    )
}

fn event(name: &str, id: u32, fields: &str) -> String {
    format!(
        "\nevent {{\n\tname = \"{name}\";\n\tid = {id};\n\tstream_id = 0;\n\tfields := struct {{\n{fields}\t}};\n}};\n"
    )
}

/// The fields of `sched_switch`.
fn sched_switch_fields() -> String {
    let s = |size, name: &str| format!("\t\t{} {name};\n", int(size, 8, true, 10, false, "none"));
    let comm = |name: &str| format!("\t\t{} {name}[16];\n", int(8, 8, false, 10, false, "UTF8"));
    [
        comm("_prev_comm"),
        s(32, "_prev_tid"),
        s(32, "_prev_prio"),
        s(64, "_prev_state"),
        comm("_next_comm"),
        s(32, "_next_tid"),
        s(32, "_next_prio"),
    ]
    .concat()
}

/// The fields of `syscall_entry_select` (three sequences).
fn select_fields() -> String {
    let u = |size, base, name: &str| {
        format!("\t\t{} {name};\n", int(size, 8, false, base, false, "none"))
    };
    let seq = |name: &str| {
        format!(
            "{}\t\t{} _{name}[ __{name}_length ];\n",
            u(8, 10, &format!("__{name}_length")),
            int(8, 8, false, 16, false, "none")
        )
    };
    [
        format!("\t\t{} _n;\n", int(32, 8, true, 10, false, "none")),
        u(8, 10, "_overflow"),
        u(64, 10, "_tvp"),
        seq("readfds"),
        seq("writefds"),
        seq("exceptfds"),
    ]
    .concat()
}

/// The whole metadata text.
pub fn metadata(host: &str, uuid: &str, clock_uuid: &str, offset_ns: i64) -> String {
    let mut text = PRELUDE
        .replace("@UUID@", uuid)
        .replace("@HOST@", host)
        .replace("@CLOCK_UUID@", clock_uuid)
        .replace("@OFFSET@", &offset_ns.to_string());
    let net = network_fields();
    text.push_str(&event("net_dev_queue", NET_DEV_QUEUE, &net));
    text.push_str(&event("net_if_receive_skb", NET_IF_RECEIVE_SKB, &net));
    text.push_str(&event("sched_switch", SCHED_SWITCH, &sched_switch_fields()));
    text.push_str(&event(
        "syscall_entry_select",
        SYSCALL_ENTRY_SELECT,
        &select_fields(),
    ));
    text
}
