//! The options of a pcapng packet block (EPB or OPB) as [`PacketOptions`]: the comments a
//! capture tool attached to a packet (`opt_comment`, tshark's `frame.comment`; weir's rule tags
//! are `weir-tag=TAG` comments) and whatever else the file stores, read on demand.
//!
//! The reader hands out only the well-formed part of a block's option list: an option whose
//! length runs past its block, or a tail too short to be an option, ends the list there (the
//! packet is kept, the reader counts the damaged list, [`FileReader::damaged_options`]).
//!
//! [`FileReader::damaged_options`]: super::FileReader::damaged_options

use weir_packet::bytes::u16_in;

/// `opt_endofopt`.
const END: u16 = 0;
/// `opt_comment`.
pub(crate) const COMMENT: u16 = 1;

/// The options of one packet, borrowing the reader's buffer (empty for classic pcap, simple
/// packet blocks and blocks without options).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PacketOptions<'a> {
    bytes: &'a [u8],
    be: bool,
}

impl<'a> PacketOptions<'a> {
    /// No options.
    pub const NONE: PacketOptions<'static> = PacketOptions {
        bytes: &[],
        be: false,
    };

    /// Options from the raw bytes of an option list (as a block stores them, in the byte order
    /// `big_endian`), e.g. those [`raw`](Self::raw) returned. Damaged bytes are safe: the list
    /// ends at the first option that does not fit.
    pub fn from_raw(bytes: &'a [u8], big_endian: bool) -> PacketOptions<'a> {
        PacketOptions {
            bytes,
            be: big_endian,
        }
    }

    /// The raw option list (what [`from_raw`](Self::from_raw) takes back).
    pub fn raw(&self) -> &'a [u8] {
        self.bytes
    }

    /// The byte order of the raw list (true: big-endian).
    pub fn big_endian(&self) -> bool {
        self.be
    }

    /// True when the packet has no option at all.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// Every option as (code, value), in file order, up to `opt_endofopt` or the first option
    /// that does not fit.
    pub fn iter(&self) -> impl Iterator<Item = (u16, &'a [u8])> + Clone {
        let (mut b, be) = (self.bytes, self.be);
        std::iter::from_fn(move || {
            if b.len() < 4 {
                return None;
            }
            let code = u16_in(b, 0, be);
            let len = u16_in(b, 2, be) as usize;
            if code == END || 4 + len > b.len() {
                return None;
            }
            let value = &b[4..4 + len];
            b = &b[((4 + len + 3) & !3).min(b.len())..];
            Some((code, value))
        })
    }

    /// The values of its `opt_comment` options (UTF-8 text by the format's rules, not checked),
    /// in file order.
    #[inline]
    pub fn comments(&self) -> impl Iterator<Item = &'a [u8]> + Clone {
        self.iter()
            .filter_map(|(code, v)| (code == COMMENT).then_some(v))
    }

    /// True when it holds at least one comment.
    #[inline]
    pub fn has_comments(&self) -> bool {
        !self.is_empty() && self.comments().next().is_some()
    }
}

/// The well-formed prefix of an option list: its length, and whether something after it was
/// damaged (an option running past the list, or 1-3 stray bytes). `opt_endofopt` ends the list
/// (what follows it is not looked at).
pub(crate) fn valid_prefix(b: &[u8], be: bool) -> (usize, bool) {
    let mut at = 0;
    while b.len() - at >= 4 {
        let code = u16_in(b, at, be);
        let len = u16_in(b, at + 2, be) as usize;
        if code == END {
            return (at, false);
        }
        if at + 4 + len > b.len() {
            return (at, true);
        }
        // the last option's padding may be missing
        at = (at + ((4 + len + 3) & !3)).min(b.len());
    }
    (at, at != b.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An option (code, value) padded to 4 bytes, little-endian.
    fn opt(code: u16, v: &[u8]) -> Vec<u8> {
        let mut b = code.to_le_bytes().to_vec();
        b.extend_from_slice(&(v.len() as u16).to_le_bytes());
        b.extend_from_slice(v);
        b.resize((b.len() + 3) & !3, 0);
        b
    }

    #[test]
    fn comments_among_other_options() {
        let mut b = opt(2, &[0, 0, 0, 1]); // epb_flags
        b.extend(opt(1, b"weir-tag=a"));
        b.extend(opt(3, &[0; 5])); // epb_hash
        b.extend(opt(1, b"second"));
        b.extend(opt(0, b""));
        b.extend(opt(1, b"after the end"));
        assert_eq!(valid_prefix(&b, false), (8 + 16 + 12 + 12, false));
        let o = PacketOptions::from_raw(&b, false);
        let c: Vec<_> = o.comments().collect();
        assert_eq!(c, [&b"weir-tag=a"[..], b"second"]);
        assert!(o.has_comments() && !PacketOptions::NONE.has_comments());
        // big-endian codes and lengths
        let be = [0, 1, 0, 2, b'h', b'i', 0, 0];
        let c: Vec<_> = PacketOptions::from_raw(&be, true).comments().collect();
        assert_eq!(c, [&b"hi"[..]]);
    }

    #[test]
    fn damaged_lists_end_where_the_damage_starts() {
        let good = opt(1, b"abc");
        // an option claiming more bytes than are left
        let mut b = good.clone();
        b.extend_from_slice(&[1, 0, 0xff, 0xff, b'x']);
        assert_eq!(valid_prefix(&b, false), (8, true));
        // stray bytes
        let mut b = good.clone();
        b.extend_from_slice(&[1, 0]);
        assert_eq!(valid_prefix(&b, false), (8, true));
        // a last option without its padding is whole
        let b = [1, 0, 3, 0, b'a', b'b', b'c'];
        assert_eq!(valid_prefix(&b, false), (7, false));
        let c: Vec<_> = PacketOptions::from_raw(&b, false).comments().collect();
        assert_eq!(c, [&b"abc"[..]]);
    }
}
