//! Checking a segment file block by block, to repair it after a crash (`kill -9`, power loss)
//! and to rebuild its manifest entry: the scan stops at the first block that is not whole and
//! consistent (a torn write, the zeros past the last write), and the file is cut there, so every
//! segment opens cleanly in tcpdump and tshark.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

use weir_packet::bytes::ne32 as u32_at;

/// What a scan found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Scan {
    /// Bytes of whole, valid blocks/records from the start: where the file must end.
    pub valid_len: u64,
    /// The file's length before any repair.
    pub file_len: u64,
    /// Packets in the valid part.
    pub packets: u64,
    /// First packet timestamp (ns).
    pub first_ns: Option<u64>,
    /// Last packet timestamp (ns).
    pub last_ns: Option<u64>,
}

impl Scan {
    fn packet(&mut self, ts: u64) {
        self.packets += 1;
        self.first_ns.get_or_insert(ts);
        self.last_ns = Some(ts);
    }
}

/// Reads the file in large pieces and hands out byte ranges by absolute offset.
struct Cursor {
    file: File,
    len: u64,
    buf: Vec<u8>,
    buf_at: u64,
}

impl Cursor {
    fn new(file: File) -> io::Result<Cursor> {
        Ok(Cursor {
            len: file.metadata()?.len(),
            file,
            buf: Vec::new(),
            buf_at: 0,
        })
    }

    /// The bytes `[off, off + n)`, or `None` past the end of the file (a file cut while it is
    /// scanned ends where it was cut).
    fn get(&mut self, off: u64, n: usize) -> io::Result<Option<&[u8]>> {
        if off + n as u64 > self.len {
            return Ok(None);
        }
        let have = off >= self.buf_at && off + n as u64 <= self.buf_at + self.buf.len() as u64;
        if !have {
            let want = (n.max(4 << 20) as u64).min(self.len - off) as usize;
            let buf = &mut self.buf;
            buf.resize(want, 0);
            let mut got = 0;
            while got < want {
                match self.file.read_at(&mut buf[got..], off + got as u64) {
                    Ok(0) => break,
                    Ok(k) => got += k,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e),
                }
            }
            buf.truncate(got);
            self.buf_at = off;
            if got < n {
                self.len = off + got as u64;
                return Ok(None);
            }
        }
        let s = (off - self.buf_at) as usize;
        Ok(Some(&self.buf[s..s + n]))
    }
}

/// Scans a pcapng segment written by weir (native byte order, nanosecond timestamps).
pub fn scan_pcapng(file: File) -> io::Result<Scan> {
    pcapng_blocks(Cursor::new(file)?)
}

/// Scans a segment file in the format its first bytes say, reading it in pieces of a few MiB:
/// how much of it is whole blocks or records (a file that is neither a weir pcapng nor a weir
/// pcap segment scans as empty). The file may be growing (a recorder writing it; it is read
/// with `read(2)`, never mapped, so the recorder cutting it cannot fault the reader): the scan
/// covers its length when opened.
pub fn scan_file(file: File, max_caplen: u32) -> io::Result<Scan> {
    let mut magic = [0u8; 4];
    let n = file.read_at(&mut magic, 0)?;
    match (n == 4).then(|| u32::from_ne_bytes(magic)) {
        Some(0x0A0D_0D0A) => pcapng_blocks(Cursor::new(file)?),
        Some(0xA1B2_3C4D) => pcap_records(Cursor::new(file)?, max_caplen),
        _ => Ok(Scan {
            file_len: file.metadata()?.len(),
            ..Scan::default()
        }),
    }
}

fn pcapng_blocks(mut c: Cursor) -> io::Result<Scan> {
    let mut s = Scan {
        file_len: c.len,
        ..Scan::default()
    };
    let mut off = 0u64;
    while let Some(h) = c.get(off, 8)? {
        let (kind, blen) = (u32_at(h, 0), u32_at(h, 4) as u64);
        let first_ok = off != 0 || kind == 0x0A0D_0D0A;
        if !first_ok || blen < 12 || blen % 4 != 0 || blen > 16 << 20 {
            break;
        }
        let Some(block) = c.get(off, blen as usize)? else {
            break;
        };
        if u32_at(block, blen as usize - 4) as u64 != blen {
            break;
        }
        if kind == 6 && blen >= 32 {
            let ts = (u64::from(u32_at(block, 12)) << 32) | u64::from(u32_at(block, 16));
            let caplen = u32_at(block, 20) as u64;
            if 28 + caplen + 4 > blen {
                break;
            }
            s.packet(ts);
        }
        off += blen;
        s.valid_len = off;
    }
    Ok(s)
}

/// Scans a pcap segment written by weir (native byte order, nanosecond magic). A record of all
/// zeros (the zero fill of an unfinished last block) ends the file.
pub fn scan_pcap(file: File, max_caplen: u32) -> io::Result<Scan> {
    pcap_records(Cursor::new(file)?, max_caplen)
}

fn pcap_records(mut c: Cursor, max_caplen: u32) -> io::Result<Scan> {
    let mut s = Scan {
        file_len: c.len,
        ..Scan::default()
    };
    match c.get(0, 24)? {
        Some(h) if u32_at(h, 0) == 0xA1B2_3C4D => s.valid_len = 24,
        _ => return Ok(s),
    }
    let mut off = 24u64;
    while let Some(h) = c.get(off, 16)? {
        let (sec, nsec, caplen, orig) = (u32_at(h, 0), u32_at(h, 4), u32_at(h, 8), u32_at(h, 12));
        if (sec, nsec, caplen, orig) == (0, 0, 0, 0) || nsec >= 1_000_000_000 || caplen > max_caplen
        {
            break;
        }
        if c.get(off + 16, caplen as usize)?.is_none() {
            break;
        }
        s.packet(u64::from(sec) * 1_000_000_000 + u64::from(nsec));
        off += 16 + u64::from(caplen);
        s.valid_len = off;
    }
    Ok(s)
}
