//! pcapng writer: one section header, one interface description block per interface (nanosecond
//! `if_tsresol`), then an enhanced packet block per packet, in this machine's byte order.

use std::io::{BufWriter, Write};

use weir_packet::PacketMeta;

use super::pcap::BUFFER;
use super::{Interface, WriteError};

/// Largest block written: what weir's reader accepts (libpcap takes up to 16 MiB).
const MAX_BLOCK: u32 = 64 << 20;

/// Streams packets into a pcapng file.
pub struct PcapngWriter<W: Write> {
    out: BufWriter<W>,
    interfaces: u32,
}

/// Appends an option (code, value) padded to 4 bytes.
fn option(buf: &mut Vec<u8>, code: u16, value: &[u8]) {
    buf.extend_from_slice(&code.to_ne_bytes());
    buf.extend_from_slice(&(value.len() as u16).to_ne_bytes());
    buf.extend_from_slice(value);
    buf.resize((buf.len() + 3) & !3, 0);
}

/// Wraps a block body with its type and both length fields.
fn block(kind: u32, body: &[u8]) -> Vec<u8> {
    let total = (12 + body.len()) as u32;
    let mut b = Vec::with_capacity(total as usize);
    b.extend_from_slice(&kind.to_ne_bytes());
    b.extend_from_slice(&total.to_ne_bytes());
    b.extend_from_slice(body);
    b.extend_from_slice(&total.to_ne_bytes());
    b
}

impl<W: Write> PcapngWriter<W> {
    /// Writes the section header block.
    pub fn new(out: W) -> Result<Self, WriteError> {
        let mut out = BufWriter::with_capacity(BUFFER, out);
        let mut body = Vec::with_capacity(64);
        body.extend_from_slice(&0x1A2B_3C4Du32.to_ne_bytes());
        body.extend_from_slice(&1u16.to_ne_bytes());
        body.extend_from_slice(&0u16.to_ne_bytes());
        body.extend_from_slice(&(-1i64).to_ne_bytes()); // section length unknown
        option(
            &mut body,
            4,
            format!("weir {}", env!("CARGO_PKG_VERSION")).as_bytes(),
        ); // shb_userappl
        option(&mut body, 0, &[]);
        out.write_all(&block(0x0A0D_0D0A, &body))?;
        Ok(PcapngWriter { out, interfaces: 0 })
    }

    /// Declares an interface and returns its id (ids count from 0 in the order added).
    pub fn add_interface(&mut self, spec: &Interface) -> Result<u32, WriteError> {
        let mut body = Vec::with_capacity(64);
        // LINKTYPE values in pcapng IDBs are 16 bits wide.
        body.extend_from_slice(&(spec.link.0 as u16).to_ne_bytes());
        body.extend_from_slice(&0u16.to_ne_bytes());
        body.extend_from_slice(&spec.snaplen.to_ne_bytes());
        if let Some(name) = &spec.name {
            option(&mut body, 2, name.as_bytes()); // if_name
        }
        option(&mut body, 9, &[9]); // if_tsresol: 10^-9 s
        option(&mut body, 0, &[]);
        self.out.write_all(&block(1, &body))?;
        self.interfaces += 1;
        Ok(self.interfaces - 1)
    }

    /// Appends one packet as an enhanced packet block on interface `meta.interface`.
    #[inline]
    pub fn write(&mut self, meta: &PacketMeta, data: &[u8]) -> Result<(), WriteError> {
        self.write_commented(meta, data, None)
    }

    /// Appends one packet as an enhanced packet block on interface `meta.interface`, with an
    /// `opt_comment` option holding `comment` (UTF-8 text; tshark shows it as `frame.comment`)
    /// when there is one. A comment longer than an option holds (65 535 bytes) is cut there.
    #[inline]
    pub fn write_commented(
        &mut self,
        meta: &PacketMeta,
        data: &[u8],
        comment: Option<&[u8]>,
    ) -> Result<(), WriteError> {
        self.write_comments(meta, data, comment)
    }

    /// Appends one packet as an enhanced packet block on interface `meta.interface`, with one
    /// `opt_comment` option per comment, in order (tshark shows them all in `frame.comment`);
    /// each is cut at 65 535 bytes, what an option holds.
    #[inline]
    pub fn write_comments<'c, I>(
        &mut self,
        meta: &PacketMeta,
        data: &[u8],
        comments: I,
    ) -> Result<(), WriteError>
    where
        I: IntoIterator<Item = &'c [u8]>,
        I::IntoIter: Clone,
    {
        if meta.interface >= self.interfaces {
            return Err(WriteError::UnknownInterface(meta.interface));
        }
        let caplen = u32::try_from(data.len()).map_err(|_| WriteError::TooLarge(data.len()))?;
        let padded = (data.len() + 3) & !3;
        let cut = |c: &'c [u8]| &c[..c.len().min(usize::from(u16::MAX))];
        let comments = comments.into_iter().map(cut);
        // each opt_comment, then opt_endofopt
        let listed: usize = comments.clone().map(|c| 4 + ((c.len() + 3) & !3)).sum();
        let options = if listed == 0 { 0 } else { listed + 4 };
        let total = u32::try_from(32 + padded + options)
            .ok()
            .filter(|&t| t <= MAX_BLOCK)
            .ok_or(WriteError::TooLarge(data.len()))?;
        let mut h = [0u8; 28];
        h[0..4].copy_from_slice(&6u32.to_ne_bytes());
        h[4..8].copy_from_slice(&total.to_ne_bytes());
        h[8..12].copy_from_slice(&meta.interface.to_ne_bytes());
        h[12..16].copy_from_slice(&((meta.ts_ns >> 32) as u32).to_ne_bytes());
        h[16..20].copy_from_slice(&(meta.ts_ns as u32).to_ne_bytes());
        h[20..24].copy_from_slice(&caplen.to_ne_bytes());
        h[24..28].copy_from_slice(&meta.orig_len.to_ne_bytes());
        self.out.write_all(&h)?;
        self.out.write_all(data)?;
        let pad = padded - data.len();
        if options > 0 {
            self.out.write_all(&[0u8; 3][..pad])?;
            let mut opts = Vec::with_capacity(options);
            for c in comments {
                option(&mut opts, 1, c); // opt_comment
            }
            option(&mut opts, 0, &[]); // opt_endofopt
            self.out.write_all(&opts)?;
            self.out.write_all(&total.to_ne_bytes())?;
            return Ok(());
        }
        let mut tail = [0u8; 7];
        tail[pad..pad + 4].copy_from_slice(&total.to_ne_bytes());
        self.out.write_all(&tail[..pad + 4])?;
        Ok(())
    }

    /// Writes out what is buffered and flushes the output (a live capture with nothing to write
    /// lets its reader see the packets so far).
    pub fn flush(&mut self) -> Result<(), WriteError> {
        self.out.flush()?;
        Ok(())
    }

    /// Flushes and returns the output.
    pub fn finish(self) -> Result<W, WriteError> {
        self.out
            .into_inner()
            .map_err(|e| WriteError::Io(e.into_error()))
    }
}

#[cfg(test)]
mod test {
    use weir_packet::{Interface, LinkType, PacketMeta};

    use super::PcapngWriter;
    use crate::FileReader;

    #[test]
    fn a_comment_is_an_opt_comment_option_the_reader_skips() {
        let mut w = PcapngWriter::new(Vec::new()).unwrap();
        w.add_interface(&Interface::new(LinkType::ETHERNET, 65535))
            .unwrap();
        let meta = PacketMeta {
            ts_ns: 1_000_000_007,
            orig_len: 60,
            interface: 0,
        };
        w.write_commented(&meta, b"abcde", Some(b"lab")).unwrap();
        w.write(&meta, b"xyz").unwrap();
        let file = w.finish().unwrap();
        // the last two blocks: 52 bytes with the comment, 44 without
        let plain = &file[file.len() - 36..];
        let epb = &file[file.len() - 36 - 52..file.len() - 36];
        let u32_at = |b: &[u8], i: usize| u32::from_ne_bytes(b[i..i + 4].try_into().unwrap());
        assert_eq!(
            (u32_at(epb, 0), u32_at(epb, 4), u32_at(epb, 48)),
            (6, 52, 52)
        );
        assert_eq!((u32_at(epb, 20), u32_at(epb, 24)), (5, 60));
        assert_eq!(&epb[28..36], b"abcde\0\0\0");
        // opt_comment (1), length 3, "lab" padded; opt_endofopt
        assert_eq!(&epb[36..38], &1u16.to_ne_bytes());
        assert_eq!(&epb[38..40], &3u16.to_ne_bytes());
        assert_eq!(&epb[40..44], b"lab\0");
        assert_eq!(&epb[44..48], &[0, 0, 0, 0]);
        assert_eq!((u32_at(plain, 0), u32_at(plain, 4)), (6, 36));
        let mut r = FileReader::from_bytes("t.pcapng", file).unwrap();
        let p = r.next_packet().unwrap().unwrap();
        assert_eq!((p.data, p.meta), (&b"abcde"[..], meta));
        let p = r.next_packet().unwrap().unwrap();
        assert_eq!(p.data, b"xyz");
        assert!(r.next_packet().unwrap().is_none());
    }

    #[test]
    fn comments_are_written_in_order_and_read_back() {
        let mut w = PcapngWriter::new(Vec::new()).unwrap();
        w.add_interface(&Interface::new(LinkType::ETHERNET, 65535))
            .unwrap();
        let meta = PacketMeta {
            ts_ns: 5,
            orig_len: 9,
            interface: 0,
        };
        let long = vec![b'x'; 70_000];
        let comments: [&[u8]; 3] = [b"weir-tag=a", b"", &long];
        w.write_comments(&meta, b"abcdefghi", comments).unwrap();
        w.write_comments(&meta, b"j", []).unwrap();
        let mut r = FileReader::from_bytes("t.pcapng", w.finish().unwrap()).unwrap();
        let p = r.next_packet().unwrap().unwrap();
        assert_eq!(p.data, b"abcdefghi");
        let got: Vec<&[u8]> = p.options.comments().collect();
        assert_eq!(got, [&b"weir-tag=a"[..], b"", &long[..65_535]]);
        let p = r.next_packet().unwrap().unwrap();
        assert!(p.options.is_empty() && p.data == b"j");
        assert_eq!(r.damaged_options(), 0);
        // classic pcap cannot hold them: said
        let mut w = crate::PacketWriter::new(
            Vec::new(),
            crate::FileFormat::Pcap(crate::Precision::Nano),
            &[Interface::new(LinkType::ETHERNET, 65535)],
        )
        .unwrap();
        assert!(!w.write_comments(&meta, b"a", comments).unwrap());
        assert!(w.write_comments(&meta, b"a", []).unwrap());
    }
}
