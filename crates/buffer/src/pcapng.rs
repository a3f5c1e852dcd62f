//! The record layout: pcapng blocks, exactly as they will sit in a file.
//!
//! Every record in the buffer is a pcapng block in host byte order (the byte order the recorder's
//! Section Header Block declares), so a committed run of the buffer is a valid run of pcapng
//! blocks and the recorder writes it to disk as it is.
//!
//! **Packet records** are Enhanced Packet Blocks, timestamps in nanoseconds (the recorder's
//! Interface Description Blocks must carry `if_tsresol = 9`):
//!
//! ```text
//! off  field
//!   0  block type = 6
//!   4  block total length = 32 + round_up(caplen, 8)
//!   8  interface id
//!  12  timestamp, high 32 bits (ns)
//!  16  timestamp, low 32 bits (ns)
//!  20  captured length (caplen)
//!  24  original length
//!  28  packet data, caplen bytes, zero-padded to 4
//!   …  [4 zero bytes = opt_endofopt, only when round_up(caplen, 4) is an odd multiple of 4]
//! L-4  block total length again
//! ```
//!
//! pcapng only asks for 4-byte alignment; the buffer keeps every block 8-byte aligned, so when
//! the data padded to 4 would leave the block at 4 mod 8, a lone `opt_endofopt` option (four zero
//! bytes, which every reader takes as "no options") fills the gap. The smallest record (caplen 0)
//! is 32 bytes, and every record is a multiple of 8.
//!
//! A packet may carry a **comment** (the rule engine's tag, see [`write_epb_commented`]): an
//! `opt_comment` option (code 1, the comment's length, the comment zero-padded to 4) after the
//! data, followed by `opt_endofopt` only when the block needs those 4 bytes to reach a multiple
//! of 8 (otherwise the options end with the block, which pcapng allows; tshark, capinfos and
//! libpcap read both forms). tshark shows the comment as `frame.comment`. Comments are at most
//! [`MAX_COMMENT`] bytes, so the largest record is [`epb_len`]`(max_caplen, MAX_COMMENT)`.
//!
//! **Padding records**, which readers of the buffer and of the file skip, are Interface
//! Statistics Blocks whose `opt_comment` fills the gap (tcpdump/libpcap skip them, capinfos does
//! not count them and tshark lists no frame for them; see BRIEF "Facts found by experiment"):
//!
//! ```text
//!   0  block type = 5            16  timestamp low
//!   4  block total length = L    20  opt_comment: code 1, length L-32
//!   8  interface id = 0          24  comment: L-32 spaces
//!  12  timestamp high          L-8  opt_endofopt (4 zero bytes)
//!                              L-4  block total length again
//! ```
//!
//! The smallest is 32 bytes (an empty comment). Since every reservation in the buffer is a whole
//! record of at least 32 bytes and a multiple of 8, and a padding record always takes over one
//! whole reservation, no gap smaller than 32 bytes can ever arise.

/// pcapng block type of an Enhanced Packet Block (a packet record).
pub const EPB_TYPE: u32 = 6;
/// pcapng block type of an Interface Statistics Block (a padding record here).
pub const ISB_TYPE: u32 = 5;
/// Bytes before the packet data in an EPB.
pub const EPB_HEADER_LEN: usize = 28;
/// The smallest block either kind of record can be: an EPB with no data, an ISB with an empty
/// comment.
pub const MIN_BLOCK_LEN: usize = 32;
/// `opt_comment`, the option code of packet comments, also used to fill padding blocks.
const OPT_COMMENT: u16 = 1;
/// Longest packet comment in bytes (longer ones are cut).
pub const MAX_COMMENT: usize = 64;

/// Length in bytes of the EPB record holding `caplen` bytes of packet.
#[inline]
pub const fn record_len(caplen: usize) -> usize {
    MIN_BLOCK_LEN + ((caplen + 7) & !7)
}

/// Length in bytes of the EPB record holding `caplen` bytes of packet and a comment of
/// `comment_len` bytes (at most [`MAX_COMMENT`]; 0: no comment, [`record_len`]).
#[inline]
pub const fn epb_len(caplen: usize, comment_len: usize) -> usize {
    if comment_len == 0 {
        return record_len(caplen);
    }
    let base = EPB_HEADER_LEN + ((caplen + 3) & !3) + 4 + ((comment_len + 3) & !3) + 4;
    // base is 0 or 4 mod 8; 4 more bytes (opt_endofopt) align it.
    (base + 7) & !7
}

#[inline]
fn put_u32(dst: &mut [u8], off: usize, v: u32) {
    dst[off..off + 4].copy_from_slice(&v.to_ne_bytes());
}

#[inline]
pub(crate) fn get_u32(src: &[u8], off: usize) -> u32 {
    u32::from_ne_bytes(src[off..off + 4].try_into().expect("4 bytes"))
}

/// Writes one EPB into `dst`, whose length must be `record_len(data.len())`.
#[inline]
pub fn write_epb(dst: &mut [u8], iface: u32, ts_ns: u64, orig_len: u32, data: &[u8]) {
    let len = dst.len();
    debug_assert_eq!(len, record_len(data.len()));
    let caplen = data.len();
    // The 28 header bytes built in registers and stored at once (one bounds check instead of
    // one per field).
    let mut head = [0u8; EPB_HEADER_LEN];
    for (i, v) in [
        EPB_TYPE,
        len as u32,
        iface,
        (ts_ns >> 32) as u32,
        ts_ns as u32,
        caplen as u32,
        orig_len,
    ]
    .into_iter()
    .enumerate()
    {
        head[i * 4..i * 4 + 4].copy_from_slice(&v.to_ne_bytes());
    }
    let Some((h, rest)) = dst.split_first_chunk_mut::<EPB_HEADER_LEN>() else {
        return;
    };
    *h = head;
    let Some((body, tail)) = rest.split_last_chunk_mut::<4>() else {
        return;
    };
    if caplen <= SMALL_COPY {
        copy_small(body, data);
    } else {
        body[..caplen].copy_from_slice(data);
        // Data padding to 4 and, when needed, the opt_endofopt that brings the block to 8:
        // zeros.
        body[caplen..].fill(0);
    }
    *tail = (len as u32).to_ne_bytes();
}

/// Longest packet [`write_epb`] copies with fixed-size moves instead of calling `memmove` and
/// `memset` (issue 20: for 64-byte frames those two calls were ≈ 7 % of `weir record
/// --no-index`'s samples on the EPYC VM, beside 10 % for the rest of `write_epb`).
const SMALL_COPY: usize = 128;

/// Copies `data` to the start of `dst` and zeroes the rest; `dst.len()` is `data.len()`
/// rounded up to 8 (an EPB's data and padding: from byte 28 to the trailing length). No loop
/// and no call (a loop of 8-byte words was turned back into a `memcpy` call by the compiler):
/// the last 8 bytes of `dst` are zeroed first, then the data is copied as two fixed-size
/// pieces that overlap (the first and the last 64, 32, 16, 8, 4 bytes, by length), which
/// writes exactly `data.len()` bytes and leaves the padding zero.
#[inline(always)]
fn copy_small(dst: &mut [u8], data: &[u8]) {
    let n = data.len();
    debug_assert_eq!(dst.len(), (n + 7) & !7);
    if n == 0 {
        return;
    }
    if let Some(last) = dst.last_chunk_mut::<8>() {
        *last = [0; 8];
    }
    let Some(dst) = dst.get_mut(..n) else {
        return;
    };
    /// Copies the first and the last `K` bytes of `s` (whose length is in `K..=2K`) to `d`.
    #[inline(always)]
    fn ends<const K: usize>(d: &mut [u8], s: &[u8]) {
        if let (Some(df), Some(sf)) = (d.first_chunk_mut::<K>(), s.first_chunk::<K>()) {
            *df = *sf;
        }
        if let (Some(dl), Some(sl)) = (d.last_chunk_mut::<K>(), s.last_chunk::<K>()) {
            *dl = *sl;
        }
    }
    match n {
        64.. => ends::<64>(dst, data),
        32..=63 => ends::<32>(dst, data),
        16..=31 => ends::<16>(dst, data),
        8..=15 => ends::<8>(dst, data),
        4..=7 => ends::<4>(dst, data),
        _ => {
            // 1 to 3 bytes: the first, the middle and the last.
            dst[0] = data[0];
            dst[n / 2] = data[n / 2];
            dst[n - 1] = data[n - 1];
        }
    }
}

/// Writes one EPB carrying `comment` as its `opt_comment` into `dst`, whose length must be
/// `epb_len(data.len(), comment.len())`; an empty comment writes [`write_epb`]'s block.
#[inline]
pub fn write_epb_commented(
    dst: &mut [u8],
    iface: u32,
    ts_ns: u64,
    orig_len: u32,
    data: &[u8],
    comment: &[u8],
) {
    if comment.is_empty() {
        return write_epb(dst, iface, ts_ns, orig_len, data);
    }
    let len = dst.len();
    debug_assert_eq!(len, epb_len(data.len(), comment.len()));
    let caplen = data.len();
    put_u32(dst, 0, EPB_TYPE);
    put_u32(dst, 4, len as u32);
    put_u32(dst, 8, iface);
    put_u32(dst, 12, (ts_ns >> 32) as u32);
    put_u32(dst, 16, ts_ns as u32);
    put_u32(dst, 20, caplen as u32);
    put_u32(dst, 24, orig_len);
    dst[EPB_HEADER_LEN..EPB_HEADER_LEN + caplen].copy_from_slice(data);
    let opt = EPB_HEADER_LEN + ((caplen + 3) & !3);
    dst[EPB_HEADER_LEN + caplen..opt].fill(0);
    dst[opt..opt + 2].copy_from_slice(&OPT_COMMENT.to_ne_bytes());
    dst[opt + 2..opt + 4].copy_from_slice(&(comment.len() as u16).to_ne_bytes());
    dst[opt + 4..opt + 4 + comment.len()].copy_from_slice(comment);
    // The comment's padding and, when present, opt_endofopt: zeros.
    dst[opt + 4 + comment.len()..len - 4].fill(0);
    put_u32(dst, len - 4, len as u32);
}

/// The fixed start of a padding block of `len` bytes (type, length, interface 0, timestamp,
/// opt_comment header); the comment (spaces), `opt_endofopt` and trailing length follow.
pub(crate) fn padding_head(len: usize, ts_ns: u64) -> [u8; 24] {
    debug_assert!(len >= MIN_BLOCK_LEN && len % 4 == 0);
    let mut h = [0u8; 24];
    put_u32(&mut h, 0, ISB_TYPE);
    put_u32(&mut h, 4, len as u32);
    put_u32(&mut h, 8, 0);
    put_u32(&mut h, 12, (ts_ns >> 32) as u32);
    put_u32(&mut h, 16, ts_ns as u32);
    h[20..22].copy_from_slice(&OPT_COMMENT.to_ne_bytes());
    h[22..24].copy_from_slice(&((len - MIN_BLOCK_LEN) as u16).to_ne_bytes());
    h
}

/// The end of a padding block of `len` bytes: `opt_endofopt` then the trailing length.
pub(crate) fn padding_tail(len: usize) -> [u8; 8] {
    let mut t = [0u8; 8];
    put_u32(&mut t, 4, len as u32);
    t
}

/// Largest padding block: its `opt_comment` length is a 16-bit field (65528 is the largest
/// multiple of 8 that fits).
const MAX_PAD: usize = MIN_BLOCK_LEN + 65_528;

/// Length of the next padding block when `rem` bytes remain to be filled: at most `MAX_PAD`,
/// and never leaving a remainder under 32 bytes. `rem` is a multiple of 8, at least 32.
pub(crate) fn pad_piece(rem: usize) -> usize {
    if rem <= MAX_PAD {
        rem
    } else if rem - MAX_PAD >= MIN_BLOCK_LEN {
        MAX_PAD
    } else {
        MAX_PAD - MIN_BLOCK_LEN
    }
}

/// Writes a padding block (an ISB that every pcapng reader skips) filling all of `dst`, for a
/// recorder that must pad the end of a segment file. `dst.len()` must be a multiple of 4 (8
/// inside the buffer), at least [`MIN_BLOCK_LEN`] and below 64 KiB + 32 (the comment length is
/// a 16-bit field); longer gaps take several blocks.
pub fn write_padding(dst: &mut [u8], ts_ns: u64) {
    let len = dst.len();
    assert!(len >= MIN_BLOCK_LEN && len % 4 == 0 && len - MIN_BLOCK_LEN <= u16::MAX as usize);
    dst[..24].copy_from_slice(&padding_head(len, ts_ns));
    dst[24..len - 8].fill(b' ');
    dst[len - 8..].copy_from_slice(&padding_tail(len));
}

/// Fills all of `dst` (a multiple of 8, at least [`MIN_BLOCK_LEN`] bytes, any length) with
/// padding blocks of at most 64 KiB each, none shorter than 32 bytes: what a recorder writes
/// at the end of a fixed-size segment file.
pub fn write_padding_run(dst: &mut [u8], ts_ns: u64) {
    assert!(dst.len() >= MIN_BLOCK_LEN && dst.len() % 8 == 0);
    let mut rest = dst;
    while !rest.is_empty() {
        let piece = pad_piece(rest.len());
        let (head, tail) = rest.split_at_mut(piece);
        write_padding(head, ts_ns);
        rest = tail;
    }
}

/// One packet record, borrowed from the buffer: a zero-copy view of an EPB.
#[derive(Clone, Copy)]
pub struct Record<'a> {
    offset: u64,
    block: &'a [u8],
}

impl<'a> Record<'a> {
    pub(crate) fn new(offset: u64, block: &'a [u8]) -> Record<'a> {
        Record { offset, block }
    }

    /// Offset of the record in the buffer's stream (never reduced modulo the size).
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// The whole EPB, header, data, padding and trailer: what the recorder writes.
    pub fn block(&self) -> &'a [u8] {
        self.block
    }

    /// Interface id given to [`Writer::push`](crate::Writer::push).
    pub fn iface(&self) -> u32 {
        get_u32(self.block, 8)
    }

    /// Timestamp in nanoseconds since the epoch.
    pub fn ts_ns(&self) -> u64 {
        (u64::from(get_u32(self.block, 12)) << 32) | u64::from(get_u32(self.block, 16))
    }

    /// Length of the packet on the wire (may exceed the captured bytes).
    pub fn orig_len(&self) -> u32 {
        get_u32(self.block, 24)
    }

    /// The captured bytes.
    pub fn data(&self) -> &'a [u8] {
        let caplen = get_u32(self.block, 20) as usize;
        &self.block[EPB_HEADER_LEN..EPB_HEADER_LEN + caplen]
    }

    /// The packet's comment (`opt_comment`, the rule engine's tag), if it has one.
    pub fn comment(&self) -> Option<&'a [u8]> {
        let caplen = get_u32(self.block, 20) as usize;
        let mut at = EPB_HEADER_LEN + ((caplen + 3) & !3);
        let end = self.block.len().saturating_sub(4);
        while at + 4 <= end {
            let code = u16::from_ne_bytes([self.block[at], self.block[at + 1]]);
            let len = u16::from_ne_bytes([self.block[at + 2], self.block[at + 3]]) as usize;
            if code == 0 || at + 4 + len > end {
                return None;
            }
            if code == OPT_COMMENT {
                return Some(&self.block[at + 4..at + 4 + len]);
            }
            at += 4 + ((len + 3) & !3);
        }
        None
    }
}

impl std::fmt::Debug for Record<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Record")
            .field("offset", &self.offset)
            .field("iface", &self.iface())
            .field("ts_ns", &self.ts_ns())
            .field("caplen", &self.data().len())
            .field("orig_len", &self.orig_len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    /// `write_epb`'s word-by-word copy of small packets writes what the plain copy and fill
    /// write (the oracle: `copy_from_slice` then zeros), for every length up to past the limit
    /// and data with no zero byte, so a byte left unwritten or copied twice shows.
    #[test]
    fn small_packets_are_written_as_the_plain_copy_writes_them() {
        for caplen in 0..=super::SMALL_COPY + 16 {
            let data: Vec<u8> = (0..caplen).map(|i| (i % 251 + 1) as u8).collect();
            let len = super::record_len(caplen);
            let mut got = vec![0xAAu8; len];
            super::write_epb(&mut got, 3, 0x1122_3344_5566_7788, 1500, &data);
            let mut want = vec![0xAAu8; len];
            want[..4].copy_from_slice(&super::EPB_TYPE.to_ne_bytes());
            want[4..8].copy_from_slice(&(len as u32).to_ne_bytes());
            want[8..12].copy_from_slice(&3u32.to_ne_bytes());
            want[12..16].copy_from_slice(&0x1122_3344u32.to_ne_bytes());
            want[16..20].copy_from_slice(&0x5566_7788u32.to_ne_bytes());
            want[20..24].copy_from_slice(&(caplen as u32).to_ne_bytes());
            want[24..28].copy_from_slice(&1500u32.to_ne_bytes());
            want[28..28 + caplen].copy_from_slice(&data);
            want[28 + caplen..len - 4].fill(0);
            want[len - 4..].copy_from_slice(&(len as u32).to_ne_bytes());
            assert_eq!(got, want, "caplen {caplen}");
        }
    }

    use super::*;

    #[test]
    fn record_len_is_8_aligned_and_at_least_32() {
        for caplen in 0..200 {
            let l = record_len(caplen);
            assert_eq!(l % 8, 0);
            assert!(l >= MIN_BLOCK_LEN);
            assert!(l >= EPB_HEADER_LEN + caplen + 4);
            assert!(l < EPB_HEADER_LEN + caplen + 4 + 8);
        }
        assert_eq!(record_len(0), 32);
        assert_eq!(record_len(64), 96);
        assert_eq!(record_len(60), 96);
        assert_eq!(record_len(1514), 1552);
    }

    #[test]
    fn padding_runs_are_whole_blocks_of_at_least_32_bytes() {
        for len in (32..300_000)
            .step_by(8 * 997)
            .chain([32, 40, 65_560, 65_568, 65_592])
        {
            let mut buf = vec![0u8; len];
            write_padding_run(&mut buf, 7);
            let mut off = 0;
            while off < len {
                assert_eq!(get_u32(&buf, off), ISB_TYPE);
                let l = get_u32(&buf, off + 4) as usize;
                assert!(l >= MIN_BLOCK_LEN && l % 8 == 0, "{len}: piece {l}");
                assert_eq!(get_u32(&buf, off + l - 4) as usize, l);
                off += l;
            }
            assert_eq!(off, len);
        }
    }

    #[test]
    fn epb_fields_and_padding() {
        for caplen in [0usize, 1, 3, 4, 5, 7, 8, 60, 64, 1514] {
            let data: Vec<u8> = (0..caplen).map(|i| i as u8 | 0x80).collect();
            let mut block = vec![0xAAu8; record_len(caplen)];
            write_epb(&mut block, 7, 0x0102_0304_0506_0708, 9000, &data);
            let len = block.len();
            assert_eq!(get_u32(&block, 0), EPB_TYPE);
            assert_eq!(get_u32(&block, 4) as usize, len);
            assert_eq!(get_u32(&block, len - 4) as usize, len);
            let r = Record::new(0, &block);
            assert_eq!(
                (r.iface(), r.ts_ns(), r.orig_len()),
                (7, 0x0102_0304_0506_0708, 9000)
            );
            assert_eq!(r.data(), &data[..]);
            // Everything between the data and the trailer is zero (padding, opt_endofopt).
            assert!(block[EPB_HEADER_LEN + caplen..len - 4]
                .iter()
                .all(|&b| b == 0));
        }
    }

    #[test]
    fn commented_epbs_are_8_aligned_and_read_back() {
        for caplen in [0usize, 1, 3, 4, 5, 7, 8, 60, 64, 1514] {
            for clen in [0usize, 1, 3, 4, 5, 8, 12, 13, 24, MAX_COMMENT] {
                let data: Vec<u8> = (0..caplen).map(|i| i as u8 | 0x80).collect();
                let comment: Vec<u8> = (0..clen).map(|i| b'a' + (i % 26) as u8).collect();
                let l = epb_len(caplen, clen);
                assert_eq!(l % 8, 0);
                assert!(clen == 0 || l >= EPB_HEADER_LEN + caplen + 4 + clen + 4);
                assert!(l <= epb_len(caplen, MAX_COMMENT));
                let mut block = vec![0xAAu8; l];
                write_epb_commented(&mut block, 3, 99, 7000, &data, &comment);
                assert_eq!(get_u32(&block, 4) as usize, l);
                assert_eq!(get_u32(&block, l - 4) as usize, l);
                let r = Record::new(0, &block);
                assert_eq!(r.data(), &data[..]);
                assert_eq!((r.iface(), r.ts_ns(), r.orig_len()), (3, 99, 7000));
                let want = (clen > 0).then_some(&comment[..]);
                assert_eq!(r.comment(), want, "caplen {caplen} comment {clen}");
            }
        }
    }

    #[test]
    fn padding_block_layout() {
        for len in [32usize, 40, 96, 4096] {
            let mut b = vec![0xAAu8; len];
            write_padding(&mut b, 5);
            assert_eq!(get_u32(&b, 0), ISB_TYPE);
            assert_eq!(get_u32(&b, 4) as usize, len);
            assert_eq!(get_u32(&b, len - 4) as usize, len);
            assert_eq!(u16::from_ne_bytes([b[20], b[21]]), 1);
            assert_eq!(u16::from_ne_bytes([b[22], b[23]]) as usize, len - 32);
            assert!(b[24..len - 8].iter().all(|&c| c == b' '));
            assert_eq!(&b[len - 8..len - 4], &[0, 0, 0, 0]);
        }
    }
}
