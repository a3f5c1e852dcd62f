//! Reading a store: which segments to search ([`segments_of`]), opening one safely while a
//! recorder may still write it ([`open_segment`]), and the packets of a time range matching a
//! filter from several stores and capture files, in global time order ([`select`]).
//!
//! Per segment, the index (when present, valid and fresh) turns the query and the time range
//! into the file ranges to read ([`Index::plan`]); a missing, corrupt or stale index means the
//! segment is scanned whole. Every packet read is confirmed by the caller's [`Matcher`] (the
//! BPF program of the expression the query came from) and by its timestamp, so the index only
//! decides what need not be read, never what is selected.
//!
//! Nothing here prints: what a command tells its user along the way (a segment missing, a
//! damaged tail, an index bypassed) is handed to a callback as a [`Notice`], whose `Display` is
//! the sentence to show.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use weir_index::{index_path, Index, IndexError, Parts, Query, ReadRange, HEAD_LEN};
use weir_packet::PacketMeta;
use weir_pcap::{FileReader, Interface, PacketOptions, ReadError};

use crate::manifest::{Manifest, SegmentState};
use crate::store::recorder_running;

/// One segment (or capture file) to search.
#[derive(Debug, Clone)]
pub struct SegmentRef {
    /// The file.
    pub path: PathBuf,
    /// Its store's manifest lists it as being written (by a running recorder, or by one that
    /// stopped without closing it).
    pub open: bool,
    /// A recorder holds its store right now.
    pub live: bool,
}

/// Why reading a store or selecting from it failed (damage is a [`Notice`], not an error).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SelectError {
    /// An input does not exist or cannot be opened.
    #[error("cannot open {}: {source}", path.display())]
    Open {
        /// The input.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// A store's manifest cannot be read.
    #[error("cannot read the manifest of {}: {source}", path.display())]
    Manifest {
        /// The store directory.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// A directory without a manifest cannot be listed.
    #[error("cannot list {}: {source}", path.display())]
    List {
        /// The directory.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// A directory that is neither a store nor holds capture files.
    #[error(
        "{}: not a store (no manifest.json) and no capture files (.pcap, .pcapng) in it",
        .0.display()
    )]
    NotAStore(PathBuf),
    /// A segment being written cannot be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The segment.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// Reading packets failed other than by damage.
    #[error(transparent)]
    Packets(#[from] ReadError),
    /// A packet selected in the first pass cannot be read again.
    #[error("a selected packet vanished")]
    Vanished,
}

/// Something a reader of stores tells its user along the way. `Display` is the sentence, to be
/// prefixed with the program's name (and "warning: " for [`warning`](Notice::is_warning)s).
#[derive(Debug)]
#[non_exhaustive]
pub enum Notice {
    /// A store has no segment yet (its output is empty).
    EmptyStore(PathBuf),
    /// A segment the manifest lists is gone (and no running recorder's retention deleted it).
    MissingSegment {
        /// The store.
        store: PathBuf,
        /// The segment's file name.
        file: String,
        /// Its packets, per the manifest.
        packets: u64,
    },
    /// A closed segment the manifest lists with packets is a file of 0 bytes (truncated after
    /// it was written): its packets cannot be searched.
    EmptiedSegment {
        /// The segment.
        path: PathBuf,
        /// Its packets, per the manifest.
        packets: u64,
    },
    /// A segment left open by a recorder that stopped ends in an unfinished tail, not read.
    UnfinishedTail {
        /// The segment.
        path: PathBuf,
        /// Bytes not read.
        bytes: u64,
    },
    /// A segment left open by a recorder that stopped holds no packet.
    NoPacket(PathBuf),
    /// A segment cannot be opened or read; skipped. The text says why.
    Unreadable(String),
    /// A file of 0 bytes; skipped.
    EmptyFile(PathBuf),
    /// A segment has no index: it is scanned (said only on request: not a problem).
    NoIndex(PathBuf),
    /// A segment's index cannot be used: it is scanned.
    BadIndex {
        /// The segment.
        path: PathBuf,
        /// Why.
        error: IndexError,
    },
    /// A part of the index of a segment without its final index (one being written, or left
    /// open by a crash) cannot be used: the chunks it indexes are read whole.
    BadIndexPart {
        /// The part's file.
        path: PathBuf,
        /// Why.
        error: String,
    },
    /// Packets of a segment have a damaged pcapng option list: they were read with the options
    /// before the damage (a comment after it is lost).
    DamagedOptions {
        /// The segment.
        path: PathBuf,
        /// How many packets (of those read).
        packets: u64,
    },
    /// A segment is damaged at `offset`: the packets before it were searched.
    Damaged {
        /// The segment.
        path: PathBuf,
        /// What is wrong there.
        reason: String,
        /// Byte offset of the damage.
        offset: u64,
        /// Packets read before it, when the segment was read from its start.
        packets: Option<u64>,
    },
}

impl Notice {
    /// A warning (something could not be read, or not the fast way), as opposed to
    /// information.
    pub fn is_warning(&self) -> bool {
        !matches!(self, Notice::EmptyStore(_) | Notice::NoIndex(_))
    }

    /// Packets may be missing from the result: a command should end with a failure status.
    pub fn is_damage(&self) -> bool {
        matches!(
            self,
            Notice::MissingSegment { .. }
                | Notice::EmptiedSegment { .. }
                | Notice::UnfinishedTail { .. }
                | Notice::Unreadable(_)
                | Notice::Damaged { .. }
        )
    }

    /// Only of interest when asked for (a verbose run).
    pub fn is_verbose(&self) -> bool {
        matches!(self, Notice::NoIndex(_))
    }
}

impl fmt::Display for Notice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Notice::EmptyStore(p) => write!(f, "{}: the store holds no segment yet", p.display()),
            Notice::MissingSegment {
                store,
                file,
                packets,
            } => write!(
                f,
                "{}: segment {file} listed in the manifest is missing (deleted?); its {packets} \
                 packets cannot be searched",
                store.display()
            ),
            Notice::EmptiedSegment { path, packets } => write!(
                f,
                "{}: empty (0 bytes) though the manifest lists {packets} packets in it; they \
                 cannot be searched",
                path.display()
            ),
            Notice::UnfinishedTail { path, bytes } => write!(
                f,
                "{}: {bytes} bytes of unfinished tail left by a recorder that stopped are not \
                 read (`weir record -o` on the store repairs it)",
                path.display()
            ),
            Notice::NoPacket(p) => write!(
                f,
                "{}: no packet in it (left by a recorder that stopped); skipped",
                p.display()
            ),
            Notice::Unreadable(why) => write!(f, "{why}; skipped"),
            Notice::EmptyFile(p) => write!(f, "{}: empty file (0 bytes), skipped", p.display()),
            Notice::NoIndex(p) => write!(f, "{}: no index, scanning it", p.display()),
            Notice::BadIndex { path, error } => write!(
                f,
                "{}: {error}; scanning the segment (`weir index` rebuilds it)",
                path.display()
            ),
            Notice::BadIndexPart { path, error } => write!(
                f,
                "{}: {error}; reading the chunks it indexes whole (`weir index` rebuilds the \
                 segment's index)",
                path.display()
            ),
            Notice::DamagedOptions { path, packets } => write!(
                f,
                "{}: {packets} packets have a damaged option list (an option runs past its \
                 block); they were read with the options before the damage",
                path.display()
            ),
            Notice::Damaged {
                path,
                reason,
                offset,
                packets: Some(n),
            } => write!(
                f,
                "{}: {reason} at byte offset {offset}; {n} packets read before the damage",
                path.display()
            ),
            Notice::Damaged {
                path,
                reason,
                offset,
                packets: None,
            } => write!(
                f,
                "{}: {reason} at byte offset {offset}; the packets before it were searched",
                path.display()
            ),
        }
    }
}

/// The segment files of the inputs, in order: a store's by its manifest (a directory without
/// one: its capture files by name), files as given. A path that does not exist, and a directory
/// that is neither a store nor holds capture files, are errors. A segment the manifest lists
/// but whose file is gone is a [`Notice::MissingSegment`] (unless a running recorder's
/// retention deleted it meanwhile); a store without segments yet a [`Notice::EmptyStore`].
pub fn segments_of(
    inputs: &[PathBuf],
    notify: &mut dyn FnMut(Notice),
) -> Result<Vec<SegmentRef>, SelectError> {
    let mut out = Vec::new();
    for p in inputs {
        let meta = std::fs::metadata(p).map_err(|source| SelectError::Open {
            path: p.clone(),
            source,
        })?;
        if !meta.is_dir() {
            out.push(SegmentRef {
                path: p.clone(),
                open: false,
                live: false,
            });
            continue;
        }
        let live = recorder_running(p);
        let listed = Manifest::load(p).map_err(|source| SelectError::Manifest {
            path: p.clone(),
            source,
        })?;
        let mut files = match listed {
            Some(m) => listed_segments(p, &m, live, notify),
            None => {
                let v: Vec<SegmentRef> = std::fs::read_dir(p)
                    .map_err(|source| SelectError::List {
                        path: p.clone(),
                        source,
                    })?
                    .filter_map(|e| e.ok().map(|e| e.path()))
                    // regular files only: reading a FIFO named x.pcap would wait for ever
                    .filter(|f| f.is_file())
                    .filter(|f| f.extension().is_some_and(|e| e == "pcap" || e == "pcapng"))
                    .map(|path| SegmentRef {
                        path,
                        open: false,
                        live: false,
                    })
                    .collect();
                if v.is_empty() {
                    return Err(SelectError::NotAStore(p.clone()));
                }
                v
            }
        };
        files.sort_by(|a, b| a.path.cmp(&b.path));
        out.extend(files);
    }
    Ok(out)
}

/// The segments a store's manifest lists whose files exist.
fn listed_segments(
    dir: &Path,
    m: &Manifest,
    live: bool,
    notify: &mut dyn FnMut(Notice),
) -> Vec<SegmentRef> {
    if m.segments.is_empty() {
        notify(Notice::EmptyStore(dir.to_path_buf()));
    }
    let mut now: Option<Manifest> = None;
    let mut v = Vec::new();
    for s in &m.segments {
        let path = dir.join(&s.file);
        if !path.exists() {
            if live {
                // Retention of the running recorder deletes old segments: gone from a fresh
                // manifest too means deleted on purpose.
                if now.is_none() {
                    now = Manifest::load(dir).ok().flatten();
                }
                let still = now
                    .as_ref()
                    .is_some_and(|m| m.segments.iter().any(|x| x.file == s.file));
                if !still {
                    continue;
                }
            }
            notify(Notice::MissingSegment {
                store: dir.to_path_buf(),
                file: s.file.clone(),
                packets: s.packets,
            });
            continue;
        }
        let open = s.state == SegmentState::Open;
        // An empty file is normal for an open segment (a recorder killed before its first
        // write) but not for a closed one that held packets.
        if !open && s.packets > 0 && std::fs::metadata(&path).is_ok_and(|m| m.len() == 0) {
            notify(Notice::EmptiedSegment {
                path,
                packets: s.packets,
            });
            continue;
        }
        v.push(SegmentRef { path, open, live });
    }
    v
}

/// The first bytes of a file (what an index's file check hashes) and its length.
pub(crate) fn head_of(path: &Path) -> io::Result<(Vec<u8>, u64)> {
    use std::os::unix::fs::FileExt;
    let f = std::fs::File::open(path)?;
    let mut head = vec![0u8; HEAD_LEN];
    let n = f.read_at(&mut head, 0)?;
    head.truncate(n);
    Ok((head, f.metadata()?.len()))
}

/// Loads the index of a segment, checking it against the segment.
pub fn load_index(path: &Path) -> Result<Index, IndexError> {
    let (head, len) = head_of(path)?;
    Index::load(&index_path(path), &head, len)
}

/// A segment opened for reading.
pub struct Opened {
    /// Its reader.
    pub reader: FileReader,
    /// Bytes readable (the whole blocks for a segment being written).
    pub len: u64,
    /// Its first bytes, for the index's file check.
    pub head: Vec<u8>,
    /// The reader reads the file as a stream, once, front to back: it cannot
    /// [`seek`](FileReader::seek) (a segment being written).
    pub stream: bool,
}

/// Largest record a recorder writes (its buffer's largest captured length).
const MAX_CAPLEN: u32 = 262_144 + 4;

/// Opens a segment. One being written is scanned for its last whole block or record, then read
/// up to there as a stream, in pieces, with `read(2)` (the recorder cuts the tail of pcap
/// segments at each flush, which would fault a mapped reader with SIGBUS), so the reader sees
/// a clean prefix. Returns `None`, with a notice unless its recorder is still writing it, for a
/// segment that holds no packet yet, or one whose file cannot be opened.
pub fn open_segment(
    seg: &SegmentRef,
    notify: &mut dyn FnMut(Notice),
) -> Result<Option<Opened>, SelectError> {
    let path = &seg.path;
    if seg.open {
        let read_err = |source| SelectError::Read {
            path: path.clone(),
            source,
        };
        let file = match std::fs::File::open(path) {
            Ok(f) => f,
            // Its recorder failed and deleted it, or retention did: nothing to read.
            Err(e) if e.kind() == io::ErrorKind::NotFound && seg.live => return Ok(None),
            Err(e) => return Err(read_err(e)),
        };
        let scan = crate::scan::scan_file(file.try_clone().map_err(read_err)?, MAX_CAPLEN)
            .map_err(read_err)?;
        if !seg.live && scan.valid_len < scan.file_len {
            notify(Notice::UnfinishedTail {
                path: path.clone(),
                bytes: scan.file_len - scan.valid_len,
            });
        }
        if scan.packets == 0 {
            if !seg.live {
                notify(Notice::NoPacket(path.clone()));
            }
            return Ok(None);
        }
        let mut head = vec![0u8; scan.valid_len.min(HEAD_LEN as u64) as usize];
        std::os::unix::fs::FileExt::read_exact_at(&file, &mut head, 0).map_err(read_err)?;
        // Reads from offset 0: the scan and the head were read with pread.
        let reader = FileReader::from_reader(path, Box::new(io::Read::take(file, scan.valid_len)))?;
        return Ok(Some(Opened {
            reader,
            len: scan.valid_len,
            head,
            stream: true,
        }));
    }
    let (head, len) = match head_of(path) {
        Ok(h) => h,
        // Retention of the running recorder deleted it since the manifest was read.
        Err(e) if seg.live && e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            notify(Notice::Unreadable(format!(
                "cannot open {}: {e}",
                path.display()
            )));
            return Ok(None);
        }
    };
    if len == 0 {
        notify(Notice::EmptyFile(path.clone()));
        return Ok(None);
    }
    match FileReader::open(path) {
        Ok(reader) => Ok(Some(Opened {
            reader,
            len,
            head,
            stream: false,
        })),
        Err(e) => {
            notify(Notice::Unreadable(e.to_string()));
            Ok(None)
        }
    }
}

/// Confirms the packets the index proposes: the real filter (a BPF program per interface).
pub trait Matcher {
    /// The caller's error type; errors of the store convert into it.
    type Error: From<SelectError>;

    /// True when every packet matches (no filter): nothing is asked per packet.
    fn matches_all(&self) -> bool;

    /// Prepares for a segment's interfaces (all of them so far, in interface-id order), when a
    /// segment is started and again when a packet names an interface not seen before.
    fn set_interfaces(&mut self, interfaces: &[Interface]) -> Result<(), Self::Error>;

    /// Whether a packet of interface `interface` matches; `None` when that interface was not
    /// among those of the last [`set_interfaces`](Self::set_interfaces).
    fn matches(&self, interface: u32, data: &[u8], orig_len: u32) -> Option<bool>;
}

/// One selected packet: where it is, for the time-ordered second pass.
struct Hit {
    ts: u64,
    segment: u32,
    /// Its record's offset in its segment.
    offset: u64,
    /// Its place in [`Selection::kept`], or [`NOT_KEPT`]: read again from its segment then.
    kept: u64,
    /// The end of the index range it was found in: a packet read again is read with the rest
    /// of that range, for the packets after it.
    range_end: u64,
}

/// [`Hit::kept`] of a packet not copied in the first pass.
const NOT_KEPT: u64 = u64::MAX;

/// Bytes of selected packets (data and options) copied out in the first pass, over all
/// segments, so the second pass need not read them again; past it, packets of files that can
/// be read again are (those of a segment read as a stream are copied whatever their size).
const KEEP_BUDGET: usize = 32 << 20;

/// A segment whose index plan reads at most this share of it is read range by range with
/// `pread` ([`FileReader::open_scattered`]); more, and it is read through a map, which does
/// better on long sequential reads. A mapped read makes the page-cache folio around it
/// resident (2 MiB with large folios): `udp and port 53` on the 1 GB bench segment (36 470
/// packets in 115 MB of candidate blocks) peaked at 559 MiB mapped.
const SCATTERED_SHARE: u64 = 2;

/// Ranges closer than this to the one before are read with it by a scattered reader (the
/// bytes between copied and skipped): `udp and port 53` on the 1 GB bench segment is 28 000
/// ranges of a 4 KiB block or two, most a few blocks apart.
const READ_AHEAD_GAP: u64 = 16 << 10;

/// Bytes at most that one read reaching over several ranges covers.
const READ_AHEAD_MAX: u64 = 1 << 20;

/// Where the read for `ranges[0]` should end: past the ranges that follow within
/// [`READ_AHEAD_GAP`] of each other, up to [`READ_AHEAD_MAX`] from its start.
fn read_ahead_end(ranges: &[ReadRange]) -> u64 {
    let Some(first) = ranges.first() else {
        return 0;
    };
    let mut end = first.end;
    for r in &ranges[1..] {
        if r.start > end.saturating_add(READ_AHEAD_GAP)
            || r.end.saturating_sub(first.start) > READ_AHEAD_MAX
        {
            break;
        }
        end = end.max(r.end);
    }
    end
}

/// True when the ranges of a plan cover at most 1 / [`SCATTERED_SHARE`] of a `len`-byte
/// segment.
fn scattered(ranges: &[ReadRange], len: u64) -> bool {
    let planned: u64 = ranges
        .iter()
        .map(|r| r.end.min(len).saturating_sub(r.start))
        .fold(0, u64::saturating_add);
    planned <= len / SCATTERED_SHARE
}

/// How much of the data a selection read.
#[derive(Clone, Copy, Debug, Default)]
pub struct SelectStats {
    /// Segments searched.
    pub segments: usize,
    /// Captured bytes of the packets read.
    pub read_bytes: u64,
    /// Bytes of the segments opened.
    pub total_bytes: u64,
}

/// A selected packet copied out of a segment read as a stream.
struct Kept {
    meta: PacketMeta,
    data: std::ops::Range<usize>,
    options: std::ops::Range<usize>,
    big_endian: bool,
}

/// How the second pass gets a segment's selected packets.
enum Held {
    /// No packet selected.
    Nothing,
    /// Read again through its reader (a mapped file, or one read with `pread`), those not
    /// copied out in the first pass ([`KEEP_BUDGET`]).
    Reread(FileReader),
    /// Copied out in the first pass (a segment read as a stream); its reader still knows the
    /// interfaces of the packets it read.
    Kept(FileReader),
}

impl Held {
    fn reader(&self) -> Option<&FileReader> {
        match self {
            Held::Nothing => None,
            Held::Reread(r) | Held::Kept(r) => Some(r),
        }
    }
}

/// The packets of a selection, found and ready to be read again in time order
/// ([`Selection::replay`]).
pub struct Selection {
    hits: Vec<Hit>,
    /// Per segment: how to get its selected packets again.
    held: Vec<Held>,
    /// The selected packets of segments read as streams, their data in `kept_bytes`, and
    /// their pcapng option lists (comments: rule tags) there too, with their byte order.
    kept: Vec<Kept>,
    kept_bytes: Vec<u8>,
    /// Per segment: its interface ids in the merged [`interfaces`](Selection::interfaces).
    maps: Vec<Option<Vec<u32>>>,
    interfaces: Vec<Interface>,
    stats: SelectStats,
}

/// The verdict on one packet read from a range: `Some(selected)`, or `None` when the matcher
/// must first learn the segment's interfaces.
#[inline]
fn verdict<M: Matcher>(
    matcher: &M,
    all: bool,
    (from, to): (u64, u64),
    meta: &PacketMeta,
    data: &[u8],
) -> Option<bool> {
    if meta.ts_ns < from || meta.ts_ns > to {
        return Some(false);
    }
    if all {
        return Some(true);
    }
    matcher.matches(meta.interface, data, meta.orig_len)
}

/// Selects the packets of `inputs` (stores and capture files) with a timestamp in `[from, to]`
/// that `matcher` accepts, narrowed to what `query` (derived from the same expression) can
/// match. Damage and skipped segments are [`Notice`]s (the packets before the damage are
/// searched); only errors that are not about the data end it.
///
/// A segment is read range by range, through a map, or with `pread` when the ranges are a small
/// part of it ([`FileReader::open_scattered`]); its selected packets are copied out up to a
/// budget ([`KEEP_BUDGET`]), the others read again by [`Selection::replay`]. A segment being
/// written is read once as a stream (the ranges only decide which packets are looked at) and
/// its selected packets are copied.
pub fn select<M: Matcher>(
    inputs: &[PathBuf],
    query: &Query,
    (from, to): (u64, u64),
    matcher: &mut M,
    notify: &mut dyn FnMut(Notice),
) -> Result<Selection, M::Error> {
    let segments = segments_of(inputs, notify)?;
    let all = matcher.matches_all();
    let mut sel = Selection {
        hits: Vec::new(),
        held: Vec::with_capacity(segments.len()),
        kept: Vec::new(),
        kept_bytes: Vec::new(),
        maps: Vec::new(),
        interfaces: Vec::new(),
        stats: SelectStats {
            segments: segments.len(),
            ..SelectStats::default()
        },
    };
    let mut index_bytes = Vec::new();
    for (si, seg) in segments.iter().enumerate() {
        let path = &seg.path;
        sel.held.push(Held::Nothing);
        let Some(Opened {
            mut reader,
            len,
            head,
            stream,
        }) = open_segment(seg, notify)?
        else {
            continue;
        };
        sel.stats.total_bytes += len;
        let quiet = seg.open && seg.live; // its index lags behind by design
                                          // What the query needs of the index (its head and its keys' lists, read with `pread`),
                                          // into one buffer reused from segment to segment: a fresh buffer for each 6 MB index of
                                          // the bench store cost ~1 600 page faults, a fifth of the CPU time of extracting a rare
                                          // host from one 1 GB segment (session 16).
        let ranges = match Index::load_for(&index_path(path), &head, len, query, &mut index_bytes) {
            Ok(ix) => ix.plan(query, from, to, len),
            Err(e) => {
                // No final index: a segment being written, or left open by a crash, has parts
                // (a final index, even a damaged one, makes any parts beside it stale).
                let parts = match &e {
                    IndexError::Io(e) if e.kind() == io::ErrorKind::NotFound => {
                        Parts::load_for(path, &head, len, query, &mut index_bytes)
                    }
                    _ => Parts::default(),
                };
                if parts.is_empty() {
                    match e {
                        IndexError::Io(e) if e.kind() == io::ErrorKind::NotFound => {
                            notify(Notice::NoIndex(path.clone()))
                        }
                        _ if quiet => {}
                        error => notify(Notice::BadIndex {
                            path: path.clone(),
                            error,
                        }),
                    }
                    vec![ReadRange::WHOLE]
                } else {
                    if !quiet {
                        for (p, error) in parts.damaged() {
                            notify(Notice::BadIndexPart {
                                path: p.to_path_buf(),
                                error: error.to_string(),
                            });
                        }
                    }
                    parts.plan(query, from, to, len)
                }
            }
        };
        let whole = ranges.len() == 1 && ranges[0].is_whole();
        if !stream && !whole && scattered(&ranges, len) {
            // The map stays the fallback: what cannot be opened again is read through it.
            if let Ok(r) = FileReader::open_scattered(path) {
                reader = r;
            }
        }
        let mut damage: Option<u64> = None;
        let mut first = 0;
        if !stream {
            // Reading the first packet parses the interface blocks that precede it.
            let read = match reader.next_packet() {
                Ok(p) => p.map(|p| p.record_offset),
                Err(e) => {
                    report_damage(e, true, &mut damage, notify)?;
                    None
                }
            };
            let Some(read) = read else {
                continue;
            };
            first = read;
            if !all {
                matcher.set_interfaces(reader.interfaces())?;
            }
        }
        // A stream learns its interfaces at its first packet.
        let mut fresh = stream;
        // The range a stream's packets are in (ranges are in file order).
        let mut ri = 0;
        let mut any = false;
        let passes = if stream { 1 } else { ranges.len() };
        for k in 0..passes {
            let range = if stream { ReadRange::WHOLE } else { ranges[k] };
            let start = range.start.max(first);
            if start >= len || damage.is_some_and(|d| start >= d) {
                continue;
            }
            if !stream {
                // Counting from the first packet: a damage report of a whole scan counts right.
                // The read reaches on over the ranges that follow closely, so that they are in
                // the buffer already (a gap copied costs less than a `pread` of its own).
                reader
                    .resume_range(start, read_ahead_end(&ranges[k..]), 0)
                    .map_err(SelectError::from)?;
            }
            loop {
                let p = match reader.next_packet() {
                    Ok(Some(p)) => p,
                    Ok(None) => break,
                    Err(e) => {
                        report_damage(e, whole || fresh, &mut damage, notify)?;
                        break;
                    }
                };
                let (meta, off) = (p.meta, p.record_offset);
                let mut data = p.data;
                let mut options = p.options;
                let be = options.big_endian();
                let first_copy: (Vec<u8>, Vec<u8>);
                if fresh {
                    fresh = false;
                    if !all {
                        // The packet borrows the reader: copy it out.
                        first_copy = (data.to_vec(), options.raw().to_vec());
                        matcher.set_interfaces(reader.interfaces())?;
                        data = &first_copy.0;
                        options = PacketOptions::from_raw(&first_copy.1, be);
                    }
                }
                if stream {
                    while ri < ranges.len() && off >= ranges[ri].end {
                        ri += 1;
                    }
                    if ri == ranges.len() {
                        break;
                    }
                    let inside = ranges[ri..]
                        .iter()
                        .take_while(|r| r.start <= off)
                        .any(|r| off >= r.skip_below && off < r.end);
                    if !inside {
                        continue;
                    }
                } else {
                    if off >= range.end || damage.is_some_and(|d| off >= d) {
                        break;
                    }
                    if off < range.skip_below {
                        continue;
                    }
                }
                sel.stats.read_bytes += data.len() as u64;
                let late_copy: (Vec<u8>, Vec<u8>);
                match verdict(matcher, all, (from, to), &meta, data) {
                    Some(true) => {}
                    Some(false) => continue,
                    None => {
                        // A new interface block: copy the packet out, as above.
                        late_copy = (data.to_vec(), options.raw().to_vec());
                        matcher.set_interfaces(reader.interfaces())?;
                        data = &late_copy.0;
                        options = PacketOptions::from_raw(&late_copy.1, be);
                        if verdict(matcher, all, (from, to), &meta, data) != Some(true) {
                            continue;
                        }
                    }
                }
                let keep = stream
                    || sel.kept_bytes.len() + data.len() + options.raw().len() <= KEEP_BUDGET;
                let kept = if keep {
                    let at = sel.kept_bytes.len();
                    sel.kept_bytes.extend_from_slice(data);
                    let o = sel.kept_bytes.len();
                    sel.kept_bytes.extend_from_slice(options.raw());
                    sel.kept.push(Kept {
                        meta,
                        data: at..at + data.len(),
                        options: o..sel.kept_bytes.len(),
                        big_endian: options.big_endian(),
                    });
                    (sel.kept.len() - 1) as u64
                } else {
                    NOT_KEPT
                };
                sel.hits.push(Hit {
                    ts: meta.ts_ns,
                    segment: si as u32,
                    offset: off,
                    kept,
                    range_end: range.end,
                });
                any = true;
            }
        }
        if reader.damaged_options() > 0 {
            notify(Notice::DamagedOptions {
                path: path.clone(),
                packets: reader.damaged_options(),
            });
        }
        if any {
            sel.held[si] = if stream {
                Held::Kept(reader)
            } else {
                Held::Reread(reader)
            };
        }
    }
    // Global time order; ties keep segment and file order.
    sel.hits.sort_by_key(|h| (h.ts, h.segment, h.offset));
    (sel.interfaces, sel.maps) = merge_interfaces(&sel.held, &sel.hits);
    Ok(sel)
}

/// The interfaces of every segment involved, one per (link type, name), in order of first use
/// by the selected packets; and for each segment, where its interfaces went.
#[allow(clippy::type_complexity)]
fn merge_interfaces(held: &[Held], hits: &[Hit]) -> (Vec<Interface>, Vec<Option<Vec<u32>>>) {
    let mut specs: Vec<Interface> = Vec::new();
    let mut maps: Vec<Option<Vec<u32>>> = held.iter().map(|_| None).collect();
    for h in hits {
        let slot = &mut maps[h.segment as usize];
        if slot.is_some() {
            continue;
        }
        let Some(r) = held[h.segment as usize].reader() else {
            continue;
        };
        let map = r
            .interfaces()
            .iter()
            .map(|i| {
                match specs
                    .iter()
                    .position(|s| s.link == i.link && s.name == i.name)
                {
                    Some(k) => k as u32,
                    None => {
                        specs.push(Interface {
                            name: i.name.clone(),
                            ..Interface::new(i.link, i.snaplen)
                        });
                        (specs.len() - 1) as u32
                    }
                }
            })
            .collect();
        *slot = Some(map);
    }
    (specs, maps)
}

/// Reports the damage that ends a segment's readable part, once per segment (a damaged region
/// can be reached from an index range and from the unindexed tail): the first one found is a
/// notice. `whole`: the segment is
/// read from its first packet on, so the reader's count of packets before the damage is right.
/// Errors that are not damage are returned.
fn report_damage(
    e: ReadError,
    whole: bool,
    damage: &mut Option<u64>,
    notify: &mut dyn FnMut(Notice),
) -> Result<(), SelectError> {
    let ReadError::Damaged {
        path,
        offset,
        reason,
        packets,
    } = e
    else {
        return Err(e.into());
    };
    if damage.is_none() {
        notify(Notice::Damaged {
            path,
            reason,
            offset,
            packets: whole.then_some(packets),
        });
    }
    if damage.is_none_or(|d| offset < d) {
        *damage = Some(offset);
    }
    Ok(())
}

impl Selection {
    /// How many packets were selected.
    pub fn len(&self) -> usize {
        self.hits.len()
    }

    /// True when no packet was selected.
    pub fn is_empty(&self) -> bool {
        self.hits.is_empty()
    }

    /// How much was read to find them.
    pub fn stats(&self) -> SelectStats {
        self.stats
    }

    /// How much the index narrowed the search, in one line (`weir extract -v`).
    pub fn summary(&self) -> String {
        let s = self.stats;
        format!(
            "{} packets from {} segment(s); read {} of {} bytes of packet data ({:.2} %)",
            self.len(),
            s.segments,
            s.read_bytes,
            s.total_bytes,
            s.read_bytes as f64 * 100.0 / s.total_bytes.max(1) as f64
        )
    }

    /// The interfaces of the selected packets, merged across segments (one per link type and
    /// name), in order of first use; empty when nothing was selected.
    pub fn interfaces(&self) -> &[Interface] {
        &self.interfaces
    }

    /// True when the selected packets come from more than one link type.
    pub fn mixed_links(&self) -> bool {
        let first = self.interfaces.first().map(|i| i.link);
        self.interfaces.iter().any(|i| Some(i.link) != first)
    }

    /// Reads every selected packet again, in time order, and hands it to `f` with its
    /// interface id in [`interfaces`](Self::interfaces) and its pcapng options (comments: the
    /// rules' tags; empty for classic pcap segments).
    pub fn replay<E: From<SelectError>>(
        &mut self,
        mut f: impl FnMut(&PacketMeta, &[u8], PacketOptions<'_>) -> Result<(), E>,
    ) -> Result<(), E> {
        for h in &self.hits {
            let seg = h.segment as usize;
            let map = self.maps[seg].as_ref().ok_or(SelectError::Vanished)?;
            let remap = |meta: &PacketMeta| -> Result<PacketMeta, SelectError> {
                let interface = *map
                    .get(meta.interface as usize)
                    .ok_or(SelectError::Vanished)?;
                Ok(PacketMeta { interface, ..*meta })
            };
            if h.kept != NOT_KEPT {
                let k = usize::try_from(h.kept)
                    .ok()
                    .and_then(|i| self.kept.get(i))
                    .ok_or(SelectError::Vanished)?;
                let options =
                    PacketOptions::from_raw(&self.kept_bytes[k.options.clone()], k.big_endian);
                f(&remap(&k.meta)?, &self.kept_bytes[k.data.clone()], options)?;
                continue;
            }
            match &mut self.held[seg] {
                Held::Reread(r) => {
                    r.resume_range(h.offset, h.range_end, 0)
                        .map_err(SelectError::from)?;
                    let p = r
                        .next_packet()
                        .map_err(SelectError::from)?
                        .ok_or(SelectError::Vanished)?;
                    f(&remap(&p.meta)?, p.data, p.options)?;
                }
                Held::Kept(_) | Held::Nothing => return Err(SelectError::Vanished.into()),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(start: u64, end: u64) -> ReadRange {
        ReadRange {
            start,
            end,
            skip_below: 0,
        }
    }

    /// A read reaches over the ranges that follow within 16 KiB of each other, never more
    /// than 1 MiB from its start, and never shortens its own range.
    #[test]
    fn a_read_reaches_over_close_ranges_only() {
        let k = 1024;
        assert_eq!(read_ahead_end(&[]), 0);
        assert_eq!(read_ahead_end(&[r(0, 4 * k)]), 4 * k);
        // 8 and 16 KiB gaps joined, then a 17 KiB gap stops it.
        let v = [
            r(0, 4 * k),
            r(12 * k, 16 * k),
            r(32 * k, 36 * k),
            r(53 * k, 60 * k),
        ];
        assert_eq!(read_ahead_end(&v), 36 * k);
        assert_eq!(read_ahead_end(&v[2..]), 36 * k);
        // Back-to-back blocks up to 1 MiB.
        let v: Vec<ReadRange> = (0..400).map(|i| r(i * 4 * k, (i + 1) * 4 * k)).collect();
        assert_eq!(read_ahead_end(&v), 1024 * k);
        // The tail of an open segment (to the end of the file) reaches over nothing more.
        assert_eq!(read_ahead_end(&[r(0, 4 * k), r(8 * k, u64::MAX)]), 4 * k);
        assert_eq!(read_ahead_end(&[r(0, u64::MAX)]), u64::MAX);
    }
}
