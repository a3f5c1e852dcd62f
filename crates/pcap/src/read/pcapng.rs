//! pcapng blocks: section header, interface description, enhanced/simple/obsolete packet blocks
//! (with where a packet block's options are, [`super::options`]).
//! Every other block type (name resolution, statistics, decryption secrets, custom) is skipped.
//!
//! Byte order is per section; interface ids are per section, so the reader maps them to one
//! global interface index.

use weir_packet::LinkType;

/// Section Header Block type; the same in both byte orders.
pub(crate) const SHB: u32 = 0x0A0D_0D0A;
/// Interface Description Block.
pub(crate) const IDB: u32 = 1;
/// Obsolete Packet Block.
pub(crate) const OPB: u32 = 2;
/// Simple Packet Block.
pub(crate) const SPB: u32 = 3;
/// Enhanced Packet Block.
pub(crate) const EPB: u32 = 6;
/// Byte-order magic of the section header.
const BYTE_ORDER_MAGIC: u32 = 0x1A2B_3C4D;

/// Largest block weir accepts; libpcap refuses blocks over 16 MiB, weir allows more but not
/// absurd values, so a corrupt length cannot make a streaming reader buffer gigabytes.
pub(crate) const MAX_BLOCK: u32 = 64 << 20;

/// True when `bytes` starts with a section header block.
pub(crate) fn is_pcapng(bytes: &[u8]) -> bool {
    bytes.len() >= 4 && u32::from_le_bytes(bytes[..4].try_into().unwrap()) == SHB
}

/// Reads a u16 / u32 in the section's byte order (`be`: big-endian).
pub(crate) use weir_packet::bytes::{u16_in as u16_at, u32_in as u32_at};

/// Returns the section's byte order (true = big-endian) from the first 12 bytes of an SHB.
pub(crate) fn section_order(b: &[u8]) -> Result<bool, String> {
    let m = u32::from_le_bytes(b[8..12].try_into().unwrap());
    if m == BYTE_ORDER_MAGIC {
        Ok(false)
    } else if m.swap_bytes() == BYTE_ORDER_MAGIC {
        Ok(true)
    } else {
        Err(format!("bad section byte-order magic {m:#010x}"))
    }
}

/// Checks a whole SHB body (the version).
pub(crate) fn check_shb(block: &[u8], be: bool) -> Result<(), String> {
    if block.len() < 28 {
        return Err(format!(
            "section header block too short ({} bytes)",
            block.len()
        ));
    }
    let major = u16_at(block, 12, be);
    if major != 1 {
        return Err(format!(
            "unsupported pcapng version {major}.{}",
            u16_at(block, 14, be)
        ));
    }
    Ok(())
}

/// How an interface's timestamps turn into nanoseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TsResol {
    /// Units of 10^-exp seconds.
    Dec(u8),
    /// Units of 2^-exp seconds.
    Bin(u8),
}

impl TsResol {
    /// Parses the `if_tsresol` byte.
    pub(super) fn from_byte(b: u8) -> TsResol {
        if b & 0x80 != 0 {
            TsResol::Bin(b & 0x7f)
        } else {
            TsResol::Dec(b)
        }
    }

    /// Converts a timestamp in this resolution to ns, saturating rather than overflowing.
    #[inline]
    pub(super) fn to_ns(self, units: u64) -> u64 {
        match self {
            TsResol::Dec(9) => units,
            TsResol::Dec(6) => units.saturating_mul(1000),
            TsResol::Dec(e) if e < 9 => units.saturating_mul(10u64.pow(9 - e as u32)),
            TsResol::Dec(e) => {
                let div = 10u128.checked_pow(e as u32 - 9).unwrap_or(u128::MAX);
                (units as u128 / div) as u64
            }
            TsResol::Bin(e) => {
                let ns = (units as u128 * 1_000_000_000) >> e.min(127);
                ns.min(u64::MAX as u128) as u64
            }
        }
    }
}

/// What an IDB says.
#[derive(Clone, Debug)]
pub(crate) struct Idb {
    pub link: LinkType,
    pub snaplen: u32,
    pub resol: TsResol,
    /// `if_tsoffset`, seconds added to every timestamp.
    pub offset_s: i64,
    pub name: Option<String>,
    pub description: Option<String>,
    /// `if_fcslen`.
    pub fcs_len: u32,
}

/// Parses a whole IDB (`block` includes the 8-byte block header and the trailing length).
pub(crate) fn parse_idb(block: &[u8], be: bool) -> Result<Idb, String> {
    if block.len() < 20 {
        return Err(format!(
            "interface description block too short ({} bytes)",
            block.len()
        ));
    }
    let mut idb = Idb {
        link: LinkType(u16_at(block, 8, be) as u32),
        snaplen: u32_at(block, 12, be),
        resol: TsResol::Dec(6),
        offset_s: 0,
        name: None,
        description: None,
        fcs_len: 0,
    };
    for (code, value) in options(&block[16..block.len() - 4], be) {
        match code {
            2 => idb.name = Some(text(value)),
            3 => idb.description = Some(text(value)),
            13 if !value.is_empty() => idb.fcs_len = value[0] as u32,
            9 if !value.is_empty() => idb.resol = TsResol::from_byte(value[0]),
            14 if value.len() >= 8 => {
                let v: [u8; 8] = value[..8].try_into().unwrap();
                idb.offset_s = if be {
                    i64::from_be_bytes(v)
                } else {
                    i64::from_le_bytes(v)
                };
            }
            _ => {}
        }
    }
    Ok(idb)
}

fn text(v: &[u8]) -> String {
    let end = v.iter().position(|&c| c == 0).unwrap_or(v.len());
    String::from_utf8_lossy(&v[..end]).into_owned()
}

/// Iterates over the (code, value) options of a block body, stopping at `opt_endofopt` or at the
/// first option that does not fit (a damaged option list ends the list, it does not fail).
pub(crate) fn options(mut b: &[u8], be: bool) -> impl Iterator<Item = (u16, &[u8])> {
    std::iter::from_fn(move || {
        if b.len() < 4 {
            return None;
        }
        let code = u16_at(b, 0, be);
        let len = u16_at(b, 2, be) as usize;
        if code == 0 || 4 + len > b.len() {
            return None;
        }
        let value = &b[4..4 + len];
        let padded = (4 + len + 3) & !3;
        b = &b[padded.min(b.len())..];
        Some((code, value))
    })
}

/// A packet found in a block, positions relative to the block start.
pub(crate) struct BlockPacket {
    /// Interface id within the section.
    pub iface: u32,
    /// Raw timestamp in interface units (`None` for SPB, which has none).
    pub ts_units: Option<u64>,
    pub data_at: usize,
    pub caplen: u32,
    pub orig_len: u32,
    /// The well-formed part of the block's option list (start, length); (0, 0) for none.
    pub opts: (usize, usize),
    /// Something after that part was damaged.
    pub opts_damaged: bool,
}

/// Parses an EPB or OPB (`block` is the whole block).
pub(crate) fn parse_epb_opb(kind: u32, block: &[u8], be: bool) -> Result<BlockPacket, String> {
    let name = if kind == EPB {
        "enhanced packet block"
    } else {
        "obsolete packet block"
    };
    if block.len() < 32 {
        return Err(format!("{name} too short ({} bytes)", block.len()));
    }
    let iface = if kind == EPB {
        u32_at(block, 8, be)
    } else {
        u16_at(block, 8, be) as u32
    };
    let ts = ((u32_at(block, 12, be) as u64) << 32) | u32_at(block, 16, be) as u64;
    let caplen = u32_at(block, 20, be);
    let orig_len = u32_at(block, 24, be);
    let room = block.len() - 32;
    if caplen as usize > room {
        return Err(format!(
            "{name} claims {caplen} captured bytes but has room for {room}"
        ));
    }
    // options between the padded data and the trailing length (caplen <= room, and the block
    // length is a multiple of 4, so the padded data fits)
    let start = (28 + ((caplen as usize + 3) & !3)).min(block.len() - 4);
    let list = &block[start..block.len() - 4];
    let (opts, opts_damaged) = if list.is_empty() {
        ((0, 0), false)
    } else {
        let (len, damaged) = super::options::valid_prefix(list, be);
        ((start, len), damaged)
    };
    Ok(BlockPacket {
        iface,
        ts_units: Some(ts),
        data_at: 28,
        caplen,
        orig_len,
        opts,
        opts_damaged,
    })
}

/// Parses an SPB; its captured length is the smaller of the original length, the interface's
/// snap length and the block's room.
pub(crate) fn parse_spb(block: &[u8], be: bool, snaplen: u32) -> Result<BlockPacket, String> {
    if block.len() < 16 {
        return Err(format!(
            "simple packet block too short ({} bytes)",
            block.len()
        ));
    }
    let orig_len = u32_at(block, 8, be);
    let room = (block.len() - 16) as u32;
    let mut caplen = orig_len.min(room);
    if snaplen != 0 {
        caplen = caplen.min(snaplen);
    }
    Ok(BlockPacket {
        iface: 0,
        ts_units: None,
        data_at: 12,
        caplen,
        orig_len,
        opts: (0, 0),
        opts_damaged: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolutions() {
        assert_eq!(TsResol::from_byte(6).to_ns(1_500_000), 1_500_000_000);
        assert_eq!(TsResol::from_byte(9).to_ns(7), 7);
        assert_eq!(TsResol::from_byte(3).to_ns(2), 2_000_000);
        assert_eq!(TsResol::from_byte(12).to_ns(5_000), 5);
        // 2^-10 s units: 1024 units = 1 s.
        assert_eq!(TsResol::from_byte(0x8a).to_ns(1024), 1_000_000_000);
        assert_eq!(TsResol::from_byte(0x80 | 30).to_ns(1 << 30), 1_000_000_000);
        // Absurd resolutions neither panic nor overflow.
        assert_eq!(TsResol::from_byte(0).to_ns(u64::MAX), u64::MAX);
        assert_eq!(TsResol::from_byte(0x7f).to_ns(u64::MAX), 0);
        assert_eq!(TsResol::from_byte(0xff).to_ns(u64::MAX), 0);
    }

    #[test]
    fn options_stop_at_damage() {
        // code 2 len 3 "abc" + pad, then a truncated option claiming 100 bytes.
        let b = [2, 0, 3, 0, b'a', b'b', b'c', 0, 9, 0, 100, 0, 1];
        let v: Vec<_> = options(&b, false).collect();
        assert_eq!(v, vec![(2u16, &b"abc"[..])]);
    }
}
