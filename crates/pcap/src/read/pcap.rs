//! Classic pcap: the 24-byte file header and the 16-byte (or 24-byte, modified format) record
//! header, in either byte order, with µs or ns timestamps.

use weir_packet::LinkType;

/// Largest captured length libpcap accepts in a record (its `MAXIMUM_SNAPLEN`); a record claiming
/// more is corrupt.
pub(crate) const MAX_SNAPLEN: u32 = 262_144;

/// What the file header says.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Header {
    pub swapped: bool,
    pub nanos: bool,
    /// Modified pcap (magic a1b2cd34): records carry 8 more bytes.
    pub modified: bool,
    pub snaplen: u32,
    pub link: LinkType,
    /// The FCS length flag bits of the link-type field (0 when absent).
    pub fcs_len: u32,
}

impl Header {
    /// Bytes in one record header.
    pub(super) fn record_header_len(&self) -> usize {
        if self.modified {
            24
        } else {
            16
        }
    }
}

/// True when `bytes` starts with one of the classic pcap magics.
pub(crate) fn is_pcap(bytes: &[u8]) -> bool {
    bytes.len() >= 4 && magic_kind(bytes[..4].try_into().unwrap()).is_some()
}

/// (swapped, nanos, modified) for a magic number read in little-endian order.
fn magic_kind(b: [u8; 4]) -> Option<(bool, bool, bool)> {
    let native = u32::from_le_bytes(b);
    let flip = native.swap_bytes();
    for (m, nanos, modified) in [
        (0xa1b2_c3d4u32, false, false),
        (0xa1b2_3c4d, true, false),
        (0xa1b2_cd34, false, true),
    ] {
        if native == m {
            return Some((false, nanos, modified));
        }
        if flip == m {
            return Some((true, nanos, modified));
        }
    }
    None
}

/// Reads a u32 from `b` at `at`, honouring the file's byte order (`swapped` = big-endian; the
/// magic is read little-endian, so on a big-endian host the meaning flips with it).
pub(crate) use weir_packet::bytes::u32_in as u32_at;

/// Parses the 24-byte file header. `bytes` holds at least 24 bytes.
pub(crate) fn parse_header(bytes: &[u8]) -> Result<Header, String> {
    let (swapped, nanos, modified) =
        magic_kind(bytes[..4].try_into().unwrap()).ok_or("bad pcap magic")?;
    let u16_at = |at: usize| weir_packet::bytes::u16_in(bytes, at, swapped);
    let major = u16_at(4);
    if major != 2 {
        return Err(format!("unsupported pcap version {major}.{}", u16_at(6)));
    }
    let snaplen = u32_at(bytes, 16, swapped);
    let raw_link = u32_at(bytes, 20, swapped);
    // The top bits carry the FCS length (pcap-savefile(5)); the link type is the low 26 bits.
    let fcs_len = if raw_link & 0x0400_0000 != 0 {
        ((raw_link >> 28) & 0xf) * 2
    } else {
        0
    };
    Ok(Header {
        swapped,
        nanos,
        modified,
        snaplen,
        link: LinkType(raw_link & 0x03ff_ffff),
        fcs_len,
    })
}

/// A record header, decoded.
pub(crate) struct Record {
    pub ts_ns: u64,
    pub caplen: u32,
    pub orig_len: u32,
}

/// Decodes the record header at the start of `b` (which holds a whole record header).
#[inline]
pub(crate) fn parse_record(h: &Header, b: &[u8]) -> Record {
    let sec = u32_at(b, 0, h.swapped) as u64;
    let frac = u32_at(b, 4, h.swapped) as u64;
    let frac_ns = if h.nanos { frac } else { frac * 1000 };
    Record {
        ts_ns: sec * 1_000_000_000 + frac_ns,
        caplen: u32_at(b, 8, h.swapped),
        orig_len: u32_at(b, 12, h.swapped),
    }
}

/// The snap length libpcap applies to records: the header's, or its maximum when the header's is
/// zero or absurd.
pub(crate) fn effective_snaplen(h: &Header) -> u32 {
    if h.snaplen == 0 || h.snaplen > MAX_SNAPLEN {
        MAX_SNAPLEN
    } else {
        h.snaplen
    }
}
