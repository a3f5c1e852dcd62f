//! The Internet checksum (RFC 1071) for the construct side of the views: a ones' complement sum
//! of big-endian 16-bit words, kept unfolded in a `u32` so parts can be summed separately (the
//! pseudo-header once per flow, the headers per packet), then folded.

use core::net::IpAddr;

/// Adds the big-endian 16-bit words of `data` to the accumulator `acc` (an odd last byte is
/// padded with a zero byte).
#[inline]
pub fn sum16(mut acc: u32, data: &[u8]) -> u32 {
    let mut chunks = data.chunks_exact(2);
    for c in &mut chunks {
        acc += u32::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [last] = chunks.remainder() {
        acc += u32::from(*last) << 8;
    }
    acc
}

/// Folds an accumulator into the 16-bit checksum (the complement of the folded sum).
#[inline]
pub fn fold(mut acc: u32) -> u16 {
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    !(acc as u16)
}

/// The unfolded sum of a TCP/UDP pseudo-header's addresses and protocol, without the length
/// (add the transport length per packet). Addresses of different families sum as given.
#[inline]
pub fn pseudo_header(src: IpAddr, dst: IpAddr, proto: u8) -> u32 {
    let addr = |acc, a: IpAddr| match a {
        IpAddr::V4(a) => sum16(acc, &a.octets()),
        IpAddr::V6(a) => sum16(acc, &a.octets()),
    };
    addr(addr(u32::from(proto), src), dst)
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn rfc1071_example() {
        // RFC 1071 section 3: the words 0001 f203 f4f5 f6f7 sum to ddf2 (folded)
        let acc = sum16(0, &[0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7]);
        assert_eq!(fold(acc), !0xddf2);
        assert_eq!(sum16(0, &[1]), 0x100);
    }
}
