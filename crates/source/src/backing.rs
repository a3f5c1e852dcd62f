//! The bytes behind a reader: a memory map for regular files, a refilling buffer for pipes.
//!
//! Both expose the same window API (`window(n)`, `advance(n)`), so the format parsers never know
//! whether the whole file is in memory or arrives from stdin.

use std::fs::File;
use std::io::{self, Read};

use memmap2::Mmap;

/// Largest block or record weir will buffer when streaming; anything claiming more is corrupt.
pub(crate) const MAX_STREAM_RECORD: usize = 256 << 20;

/// The bytes of a capture file and a cursor into them.
pub(crate) enum Backing {
    /// A whole file in memory (a map, or bytes handed in by the caller).
    Whole { bytes: Whole, pos: usize },
    /// A stream read in chunks; `buf[start..end]` is unread data at file offset `base + start`.
    Stream {
        reader: Box<dyn Read + Send>,
        buf: Vec<u8>,
        start: usize,
        end: usize,
        base: u64,
        eof: bool,
    },
}

/// Bytes held in memory in full.
pub(crate) enum Whole {
    Map(Mmap),
    Owned(Vec<u8>),
}

impl Whole {
    fn as_slice(&self) -> &[u8] {
        match self {
            Whole::Map(m) => m,
            Whole::Owned(v) => v,
        }
    }
}

impl Backing {
    /// Maps `file` read-only.
    pub(crate) fn map(file: &File) -> io::Result<Backing> {
        // SAFETY: the map is read-only and private to this process. If another process truncates
        // the file while we read it, accesses past the new end raise SIGBUS; that is the accepted
        // risk of every mmap-based reader (ripgrep, tcpdump's peers) and is documented on
        // `FileReader::open`. Concurrent appends are harmless: we only see the mapped length.
        let map = unsafe { Mmap::map(file)? };
        #[cfg(unix)]
        let _ = map.advise(memmap2::Advice::Sequential);
        Ok(Backing::Whole {
            bytes: Whole::Map(map),
            pos: 0,
        })
    }

    pub(crate) fn owned(bytes: Vec<u8>) -> Backing {
        Backing::Whole {
            bytes: Whole::Owned(bytes),
            pos: 0,
        }
    }

    pub(crate) fn stream(reader: Box<dyn Read + Send>) -> Backing {
        Backing::Stream {
            reader,
            buf: vec![0; 1 << 20],
            start: 0,
            end: 0,
            base: 0,
            eof: false,
        }
    }

    /// File offset of the cursor.
    pub(crate) fn offset(&self) -> u64 {
        match self {
            Backing::Whole { pos, .. } => *pos as u64,
            Backing::Stream { base, start, .. } => base + *start as u64,
        }
    }

    /// Returns the unread bytes, at least `want` of them unless the input ends first (then all
    /// that is left). A streamed window never holds more than `MAX_STREAM_RECORD` on demand.
    pub(crate) fn window(&mut self, want: usize) -> io::Result<&[u8]> {
        match self {
            Backing::Whole { bytes, pos } => Ok(&bytes.as_slice()[*pos..]),
            Backing::Stream {
                reader,
                buf,
                start,
                end,
                base,
                eof,
            } => {
                let want = want.min(MAX_STREAM_RECORD);
                if *end - *start < want && !*eof {
                    if *start > 0 {
                        buf.copy_within(*start..*end, 0);
                        *base += *start as u64;
                        *end -= *start;
                        *start = 0;
                    }
                    if buf.len() < want {
                        buf.resize(want.next_power_of_two(), 0);
                    }
                    while *end < want {
                        match reader.read(&mut buf[*end..]) {
                            Ok(0) => {
                                *eof = true;
                                break;
                            }
                            Ok(n) => *end += n,
                            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                            Err(e) => return Err(e),
                        }
                    }
                }
                Ok(&buf[*start..*end])
            }
        }
    }

    /// The unread bytes already available, without reading more.
    pub(crate) fn current(&self) -> &[u8] {
        match self {
            Backing::Whole { bytes, pos } => &bytes.as_slice()[*pos..],
            Backing::Stream { buf, start, end, .. } => &buf[*start..*end],
        }
    }

    /// The last `n` bytes the cursor moved over (they stay valid until the next `window`).
    pub(crate) fn behind(&self, n: usize) -> &[u8] {
        match self {
            Backing::Whole { bytes, pos } => &bytes.as_slice()[*pos - n..*pos],
            Backing::Stream { buf, start, .. } => &buf[*start - n..*start],
        }
    }

    /// Moves the cursor forward by `n` bytes, which must be within the last window.
    pub(crate) fn advance(&mut self, n: usize) {
        match self {
            Backing::Whole { pos, .. } => *pos += n,
            Backing::Stream { start, .. } => *start += n,
        }
    }
}
