//! The stamp every synthetic packet carries at the start of its UDP (or TCP) payload, so that a
//! receiver can tell streams apart, count loss, duplicates and reordering, and measure latency.
//!
//! Layout (18 bytes, network byte order), at offset 0 of the transport payload:
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 4 | magic `WGEN` (0x5747454e) |
//! | 4 | 2 | stream id |
//! | 6 | 4 | sequence number within the stream, from 0, wrapping at 2^32 |
//! | 10 | 8 | send time, ns since the Unix epoch: CLOCK_REALTIME just before the frame is handed to the kernel (at top speed, the start of its batch of at most a few µs), or the planned time when written to a file |
//!
//! The rest of the payload is zero filler. 18 bytes is what a 64-byte Ethernet frame (60 bytes
//! without its FCS) leaves after Ethernet, IPv4 and UDP headers, so the smallest frame carries it.

/// The stamp's magic, `WGEN`.
pub const MAGIC: [u8; 4] = *b"WGEN";

/// Length of a stamp in bytes.
pub const STAMP_LEN: usize = 18;

/// What a stamp says.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Stamp {
    /// Stream id.
    pub stream: u16,
    /// Sequence number within the stream (wraps at 2^32).
    pub seq: u32,
    /// Send time, ns since the Unix epoch.
    pub send_ns: u64,
}

impl Stamp {
    /// Writes the stamp at the start of `buf` (which must hold [`STAMP_LEN`] bytes).
    #[inline]
    pub fn write(&self, buf: &mut [u8]) {
        buf[0..4].copy_from_slice(&MAGIC);
        buf[4..6].copy_from_slice(&self.stream.to_be_bytes());
        buf[6..10].copy_from_slice(&self.seq.to_be_bytes());
        buf[10..18].copy_from_slice(&self.send_ns.to_be_bytes());
    }

    /// Reads a stamp from the start of a transport payload, if it carries one.
    #[inline]
    pub fn parse(payload: &[u8]) -> Option<Stamp> {
        if payload.len() < STAMP_LEN || payload[0..4] != MAGIC {
            return None;
        }
        Some(Stamp {
            stream: u16::from_be_bytes([payload[4], payload[5]]),
            seq: u32::from_be_bytes(payload[6..10].try_into().ok()?),
            send_ns: u64::from_be_bytes(payload[10..18].try_into().ok()?),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let s = Stamp {
            stream: 0xbeef,
            seq: 0x0102_0304,
            send_ns: 1_700_000_000_123_456_789,
        };
        let mut buf = [0u8; 20];
        s.write(&mut buf);
        assert_eq!(&buf[..4], b"WGEN");
        assert_eq!(&buf[4..6], &[0xbe, 0xef]);
        assert_eq!(&buf[6..10], &[1, 2, 3, 4]);
        assert_eq!(Stamp::parse(&buf), Some(s));
        assert_eq!(Stamp::parse(&buf[..17]), None);
        buf[0] = b'X';
        assert_eq!(Stamp::parse(&buf), None);
    }
}
