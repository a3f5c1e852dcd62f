//! Fixed-width integers read from (and written into) byte slices at an offset: network byte
//! order for packet headers (`be16`...), and the byte order a capture file's header chose
//! (`u16_in`, `u32_in`) for pcap and pcapng records.
//!
//! Every reader but [`be16_checked`] panics when the slice is too short, like slice indexing:
//! callers check the length first (the typed views of `weir-decode` do it once in
//! `new_checked`). Each one compiles to one range check and a single (byte-swapped) load, the
//! check often proven away.

/// The big-endian `u16` at `b[at..at + 2]`.
#[inline(always)]
pub fn be16(b: &[u8], at: usize) -> u16 {
    let mut x = [0u8; 2];
    x.copy_from_slice(&b[at..at + 2]);
    u16::from_be_bytes(x)
}

/// The big-endian `u16` at `b[at..at + 2]`, or `None` when the slice is too short: for
/// parsers of hostile bytes that walk lengths they read (TLS extensions, a UDP length) rather
/// than check a header's length once.
#[inline(always)]
pub fn be16_checked(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes(*b.get(at..)?.first_chunk::<2>()?))
}

/// The big-endian `u32` at `b[at..at + 4]`.
#[inline(always)]
pub fn be32(b: &[u8], at: usize) -> u32 {
    let mut x = [0u8; 4];
    x.copy_from_slice(&b[at..at + 4]);
    u32::from_be_bytes(x)
}

/// The big-endian `u64` at `b[at..at + 8]`.
#[inline(always)]
pub fn be64(b: &[u8], at: usize) -> u64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[at..at + 8]);
    u64::from_be_bytes(x)
}

/// The big-endian `u128` at `b[at..at + 16]` (an IPv6 address as a number).
#[inline(always)]
pub fn be128(b: &[u8], at: usize) -> u128 {
    let mut x = [0u8; 16];
    x.copy_from_slice(&b[at..at + 16]);
    u128::from_be_bytes(x)
}

/// The `u16` at `b[at..at + 2]`, big-endian when `big` is set, little-endian otherwise (a
/// pcapng section's or a pcap file's byte order).
#[inline(always)]
pub fn u16_in(b: &[u8], at: usize, big: bool) -> u16 {
    let v = [b[at], b[at + 1]];
    if big {
        u16::from_be_bytes(v)
    } else {
        u16::from_le_bytes(v)
    }
}

/// The `u32` at `b[at..at + 4]`, big-endian when `big` is set, little-endian otherwise.
#[inline(always)]
pub fn u32_in(b: &[u8], at: usize, big: bool) -> u32 {
    let v = [b[at], b[at + 1], b[at + 2], b[at + 3]];
    if big {
        u32::from_be_bytes(v)
    } else {
        u32::from_le_bytes(v)
    }
}

/// The native-endian `u32` at `b[at..at + 4]` (structures the kernel or this host wrote).
#[inline(always)]
pub fn ne32(b: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Writes `v` big-endian into `b[at..at + 2]`.
#[inline(always)]
pub fn put_be16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_be_bytes());
}

/// Writes `v` big-endian into `b[at..at + 4]`.
#[inline(always)]
pub fn put_be32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_be_bytes());
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn orders() {
        let b = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17];
        assert_eq!(be16(&b, 1), 0x0203);
        assert_eq!(be32(&b, 1), 0x0203_0405);
        assert_eq!(be64(&b, 0), 0x0102_0304_0506_0708);
        assert_eq!(be128(&b, 1), 0x0203_0405_0607_0809_0a0b_0c0d_0e0f_1011);
        assert_eq!(u16_in(&b, 0, true), 0x0102);
        assert_eq!(u16_in(&b, 0, false), 0x0201);
        assert_eq!(u32_in(&b, 0, true), 0x0102_0304);
        assert_eq!(u32_in(&b, 0, false), 0x0403_0201);
        assert_eq!(ne32(&b, 0), u32::from_ne_bytes([1, 2, 3, 4]));
        let mut w = [0u8; 6];
        put_be16(&mut w, 0, 0xabcd);
        put_be32(&mut w, 2, 0x0102_0304);
        assert_eq!(w, [0xab, 0xcd, 1, 2, 3, 4]);
    }
}
