//! The hash that stands in `udp_data` for the hashed UDP kinds: what it covers and what it
//! tells apart. The kernel programs compute the same function on the same words
//! (`tsync-ebpf/src/digest.rs`); the real-kernel tests (`tsync-lab/tests/digests.rs`) check that
//! a captured datagram's digest is this one.

use tsync_common::{UDP_HASHED_BYTES, udp_hashed_data, udp_payload_hash};

#[test]
fn it_covers_the_first_32_bytes_and_their_count() {
    assert_eq!(UDP_HASHED_BYTES, 32);
    let payload: Vec<u8> = (0..200u8).collect();
    // Bytes past the 32nd do not count.
    assert_eq!(udp_hashed_data(&payload), udp_hashed_data(&payload[..32]));
    let mut later = payload.clone();
    later[32] ^= 1;
    assert_eq!(udp_hashed_data(&later), udp_hashed_data(&payload));
    // Any one of the 32 does, and so does the count: a datagram hashed over fewer bytes (at an
    // end where fewer were linear) never takes the digest of one hashed whole.
    for i in 0..UDP_HASHED_BYTES {
        let mut other = payload.clone();
        other[i] ^= 0x80;
        assert_ne!(
            udp_hashed_data(&other),
            udp_hashed_data(&payload),
            "byte {i}"
        );
    }
    assert_ne!(udp_hashed_data(&[0; 3]), udp_hashed_data(&[0; 4]));
    assert_ne!(udp_hashed_data(&[]), udp_hashed_data(&[0]));
}

#[test]
fn bytes_are_little_endian_words_zero_past_the_count() {
    let mut words = [0u64; UDP_HASHED_BYTES / 8];
    words[0] = u64::from_le_bytes(*b"01234567");
    words[1] = u64::from(b'8') | u64::from(b'9') << 8;
    assert_eq!(
        udp_hashed_data(b"0123456789"),
        udp_payload_hash(&words, 10).to_le_bytes()
    );
}

/// QUIC's short header: one flags byte and a fixed 8-byte connection ID, then the packet
/// number and ciphertext. Datagrams of one connection alike in their first 9 bytes (and in
/// length, and without an IP ID) are told apart by what follows.
#[test]
fn datagrams_alike_in_their_first_bytes_are_told_apart() {
    let mut seen = std::collections::HashSet::new();
    for n in 0u32..10_000 {
        let mut d = vec![0x40, 1, 2, 3, 4, 5, 6, 7, 8];
        d.extend_from_slice(&n.to_be_bytes());
        d.extend_from_slice(&[0xAA; 40]);
        assert!(seen.insert(udp_hashed_data(&d)), "datagram {n} collides");
    }
}

/// Two bytes that change together, at the top of two words (where a product's difference is
/// confined to the top bits, so a plain sum of products would collide one time in 256): in
/// either chain, and across the chains, every one of the 65 536 combinations has a hash of its
/// own.
#[test]
fn two_changed_bytes_at_the_top_of_two_words_do_not_cancel() {
    for (i, j) in [(7, 15), (7, 23), (15, 31), (23, 31), (0, 8)] {
        let mut seen = std::collections::HashSet::new();
        for a in 0..=255u8 {
            for b in 0..=255u8 {
                let mut d = [0x5au8; 32];
                d[i] = a;
                d[j] = b;
                assert!(seen.insert(udp_hashed_data(&d)), "bytes {i}, {j}: {a}, {b}");
            }
        }
    }
}
