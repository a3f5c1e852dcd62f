//! What `weir ls` lists and `weir index` builds: a store's segments with the state and size of
//! each one's index ([`Listing`]), what to do with a segment asked to be indexed
//! ([`index_action`]) and the building of one segment's index ([`build_index`]).
//!
//! Nothing here prints: the listing is data (and JSON), notices and damage go to callbacks.

use std::path::{Path, PathBuf};

use weir_index::{index_path, part_paths, remove_parts, IndexBuilder, IndexError, Parts};
use weir_packet::output::human_bytes;
use weir_pcap::ReadError;

use crate::manifest::{Manifest, SegmentInfo};
use crate::select::{head_of, load_index, open_segment, Notice, Opened, SegmentRef, SelectError};

/// Why a store cannot be listed or an index built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InventoryError {
    /// The directory cannot be opened.
    #[error("cannot open {}: {source}", path.display())]
    Open {
        /// The path given.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The path is a file.
    #[error(
        "{} is a file, not a store directory (`weir info` describes capture files)",
        .0.display()
    )]
    NotADirectory(PathBuf),
    /// The directory has no manifest.
    #[error("{} is not a store (no manifest.json)", .0.display())]
    NotAStore(PathBuf),
    /// Reading the store or a segment failed (its manifest, its files).
    #[error(transparent)]
    Select(#[from] SelectError),
    /// Reading packets failed other than by damage.
    #[error(transparent)]
    Read(#[from] ReadError),
    /// The index file cannot be written.
    #[error("cannot write {}: {source}", path.display())]
    Write {
        /// The index file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// The state of a segment's index as `weir ls` shows it: `ok (K keys, C chunks)`, for one
/// being written (or left open by a crash) `ok (N parts, covering B of its L bytes)` (with how
/// many parts cannot be used, their chunks then read whole), `none`, or why it cannot be used;
/// and its files' size ([`index_files_bytes`]).
pub fn index_state(segment: &Path) -> (String, u64) {
    let size = index_files_bytes(segment);
    let state = match load_index(segment) {
        Ok(ix) => format!("ok ({} keys, {} chunks)", ix.keys(), ix.chunks()),
        Err(IndexError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => {
            parts_state(segment).unwrap_or_else(|| "none".into())
        }
        Err(e) => e.to_string(),
    };
    (state, size)
}

/// The state of a segment's index parts, `None` when it has none.
fn parts_state(segment: &Path) -> Option<String> {
    let (head, len) = head_of(segment).ok()?;
    let parts = Parts::load(segment, &head, len);
    if parts.is_empty() {
        return None;
    }
    let bad = parts.damaged().count();
    let unusable = if bad > 0 {
        format!(", {bad} unusable (their chunks are read whole)")
    } else {
        String::new()
    };
    Some(format!(
        "ok ({} parts{unusable}, covering {} of its {} bytes)",
        parts.parts.len(),
        parts.covered_len(),
        len
    ))
}

/// Bytes of a segment's index files: its final index (`SEGMENT.idx`), or while it has none,
/// its parts (`SEGMENT.idx.p<N>`); 0 when it has neither.
pub fn index_files_bytes(segment: &Path) -> u64 {
    match std::fs::metadata(index_path(segment)) {
        Ok(m) => m.len(),
        Err(_) => part_paths(segment)
            .iter()
            .filter_map(|(_, p)| std::fs::metadata(p).ok())
            .map(|m| m.len())
            .sum(),
    }
}

/// One segment of a [`Listing`].
#[derive(Debug, Clone)]
pub struct Row {
    /// The segment as the manifest has it.
    pub segment: SegmentInfo,
    /// Its index's state ([`index_state`]).
    pub index: String,
    /// Its index file's size.
    pub index_bytes: u64,
}

/// A store's segments and their indexes.
#[derive(Debug, Clone)]
pub struct Listing {
    /// The manifest.
    pub manifest: Manifest,
    /// One row per segment, in the manifest's order.
    pub rows: Vec<Row>,
}

impl Listing {
    /// Lists the store in `dir`.
    pub fn load(dir: &Path) -> Result<Listing, InventoryError> {
        let meta = std::fs::metadata(dir).map_err(|source| InventoryError::Open {
            path: dir.to_owned(),
            source,
        })?;
        if !meta.is_dir() {
            return Err(InventoryError::NotADirectory(dir.to_owned()));
        }
        let manifest = Manifest::load(dir)
            .map_err(|source| SelectError::Manifest {
                path: dir.to_owned(),
                source,
            })?
            .ok_or_else(|| InventoryError::NotAStore(dir.to_owned()))?;
        let rows = manifest
            .segments
            .iter()
            .map(|s| {
                let (index, index_bytes) = index_state(&dir.join(&s.file));
                Row {
                    segment: s.clone(),
                    index,
                    index_bytes,
                }
            })
            .collect();
        Ok(Listing { manifest, rows })
    }

    /// Bytes of segment data.
    pub fn data_bytes(&self) -> u64 {
        self.rows.iter().map(|r| r.segment.bytes).sum()
    }

    /// Bytes of index files.
    pub fn index_bytes(&self) -> u64 {
        self.rows.iter().map(|r| r.index_bytes).sum()
    }

    /// Packets in the segments.
    pub fn packets(&self) -> u64 {
        self.rows.iter().map(|r| r.segment.packets).sum()
    }

    /// Packets dropped while they were written.
    pub fn drops(&self) -> u64 {
        self.rows.iter().map(|r| r.segment.drops).sum()
    }

    /// The index's share of the data, in percent.
    pub fn index_percent(&self) -> f64 {
        self.index_bytes() as f64 * 100.0 / self.data_bytes().max(1) as f64
    }

    /// Writes the listing to `out` (`weir ls`): the table, or (`json`) one pretty-printed JSON
    /// document; then flushes.
    pub fn write(&self, out: &mut dyn std::io::Write, json: bool) -> std::io::Result<()> {
        if json {
            writeln!(out, "{:#}", self.to_json())?;
        } else {
            self.write_table(out)?;
        }
        out.flush()
    }

    /// `weir ls`'s table: a header, one row per segment, a total line.
    pub fn write_table(&self, out: &mut dyn std::io::Write) -> std::io::Result<()> {
        writeln!(
            out,
            "{:<44} {:<9} {:<29} {:<29} {:>10} {:>10} {:>7} {:>10}  index state",
            "segment",
            "state",
            "first packet (UTC)",
            "last packet",
            "packets",
            "bytes",
            "drops",
            "index size"
        )?;
        let t = |v: Option<u64>| v.map_or("-".into(), weir_packet::time::datetime);
        for r in &self.rows {
            let s = &r.segment;
            writeln!(
                out,
                "{:<44} {:<9} {:<29} {:<29} {:>10} {:>10} {:>7} {:>10}  {}",
                s.file,
                format!("{:?}", s.state).to_lowercase(),
                t(s.first_ns),
                t(s.last_ns),
                s.packets,
                human_bytes(s.bytes),
                s.drops,
                human_bytes(r.index_bytes),
                r.index
            )?;
        }
        writeln!(
            out,
            "{} segment(s), {} packets, {} of data, {} of index ({:.2} % of the data), {} drops",
            self.rows.len(),
            self.packets(),
            human_bytes(self.data_bytes()),
            human_bytes(self.index_bytes()),
            self.index_percent(),
            self.drops()
        )
    }

    /// The listing as `weir ls --json` prints it.
    pub fn to_json(&self) -> serde_json::Value {
        let m = &self.manifest;
        serde_json::json!({
            "format": m.format,
            "segment_size": m.segment_size,
            "interfaces": m.interfaces,
            "bytes": self.data_bytes(),
            "index_bytes": self.index_bytes(),
            "packets": self.packets(),
            "drops": self.drops(),
            "segments": self.rows.iter().map(|r| {
                let s = &r.segment;
                serde_json::json!({
                    "file": s.file,
                    "state": s.state,
                    "first_ns": s.first_ns,
                    "last_ns": s.last_ns,
                    "packets": s.packets,
                    "bytes": s.bytes,
                    "drops": s.drops,
                    "index_bytes": r.index_bytes,
                    "index": r.index,
                })
            }).collect::<Vec<_>>(),
        })
    }
}

/// What `weir index` does with one segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IndexAction {
    /// Its running recorder indexes it: left alone.
    LeaveToRecorder,
    /// Its index is valid (in a store directory, without `force`): left alone.
    UpToDate,
    /// Build its index; `unfinished` when a recorder that stopped left it open (it is indexed
    /// as far as it holds whole blocks).
    Build {
        /// Left open by a recorder that stopped.
        unfinished: bool,
    },
}

/// What to do with `seg`, found in a store directory (`in_store`) or given as a file, with
/// `force` rebuilding valid indexes too.
pub fn index_action(seg: &SegmentRef, in_store: bool, force: bool) -> IndexAction {
    if seg.open && seg.live {
        IndexAction::LeaveToRecorder
    } else if in_store && !force && !seg.open && load_index(&seg.path).is_ok() {
        IndexAction::UpToDate
    } else {
        IndexAction::Build {
            unfinished: seg.open,
        }
    }
}

/// An index built by [`build_index`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Built {
    /// Packets indexed.
    pub packets: u64,
    /// Size of the index file written.
    pub index_bytes: u64,
    /// Bytes of the segment it covers.
    pub data_bytes: u64,
}

/// Builds the index of `seg` with chunks of `chunk` bytes and writes it beside it (`FILE.idx`).
/// Damage ends the segment like its end, after `on_damage` heard about it; the index covers
/// what was read. `None` when the segment holds nothing to index (see [`open_segment`]).
pub fn build_index(
    seg: &SegmentRef,
    chunk: u32,
    notify: &mut dyn FnMut(Notice),
    on_damage: &mut dyn FnMut(ReadError),
) -> Result<Option<Built>, InventoryError> {
    let Some(Opened {
        reader: mut r,
        len,
        head,
        ..
    }) = open_segment(seg, notify)?
    else {
        return Ok(None);
    };
    let mut b = IndexBuilder::new(chunk);
    let mut covered = 0;
    loop {
        match r.next_packet() {
            Ok(Some(p)) => b.add(p.record_offset, p.meta.ts_ns, p.link, p.data),
            Ok(None) => break,
            Err(e @ ReadError::Damaged { .. }) => {
                on_damage(e);
                break;
            }
            Err(e) => return Err(e.into()),
        }
        covered = r.offset();
    }
    let bytes = b.serialize(covered.min(len), weir_index::head_hash(&head));
    let out = index_path(&seg.path);
    crate::disk::write_renamed(&out, &bytes).map_err(|source| InventoryError::Write {
        path: out.clone(),
        source,
    })?;
    // A segment left open by a crash may have index parts: the final index replaces them.
    remove_parts(&seg.path);
    Ok(Some(Built {
        packets: b.packets(),
        index_bytes: bytes.len() as u64,
        data_bytes: len,
    }))
}

/// `weir index` on one input: a capture file (its index is built) or a store directory (its
/// segments without a valid index get one, all of them with `force`; the one a running recorder
/// writes is left to it; one left open by a recorder that stopped is indexed as far as it holds
/// whole blocks). What it does is said through `say` (`PATH: N packets indexed in ...`), what
/// reading finds through `notify` and `on_damage`.
pub fn index_input(
    input: &Path,
    chunk: u32,
    force: bool,
    notify: &mut dyn FnMut(Notice),
    on_damage: &mut dyn FnMut(ReadError),
    say: &mut dyn FnMut(String),
) -> Result<(), InventoryError> {
    let segs = crate::select::segments_of(&[input.to_path_buf()], notify)?;
    let mut up_to_date = 0;
    for seg in &segs {
        let path = seg.path.display();
        match index_action(seg, input.is_dir(), force) {
            IndexAction::LeaveToRecorder => {
                say(format!("{path}: being written; the recorder indexes it"));
                continue;
            }
            IndexAction::UpToDate => {
                up_to_date += 1;
                continue;
            }
            IndexAction::Build { unfinished: true } => say(format!(
                "{path}: left open by a recorder that stopped; indexing what it holds (`weir \
                 record -o` on the store repairs it)"
            )),
            IndexAction::Build { unfinished: false } => {}
        }
        let started = std::time::Instant::now();
        let Some(b) = build_index(seg, chunk, notify, on_damage)? else {
            continue;
        };
        say(format!(
            "{path}: {} packets indexed in {:.2} s; index {} ({:.2} % of {})",
            b.packets,
            started.elapsed().as_secs_f64(),
            human_bytes(b.index_bytes),
            b.index_bytes as f64 * 100.0 / b.data_bytes.max(1) as f64,
            human_bytes(b.data_bytes)
        ));
    }
    if up_to_date > 0 {
        say(format!(
            "{}: {up_to_date} segment(s) already indexed (--force rebuilds them)",
            input.display()
        ));
    } else if segs.is_empty() {
        say(format!("{}: nothing to index", input.display()));
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::manifest::{InterfaceInfo, SegmentState};
    use weir_packet::{Interface, LinkType, PacketMeta};
    use weir_pcap::{FileFormat, PacketWriter, Precision};

    /// A UDP/IPv4 frame of 60 bytes from 10.0.0.1:1000 to 10.0.0.2:2000.
    fn frame() -> Vec<u8> {
        let mut f = vec![0u8; 60];
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        f[14] = 0x45;
        f[16..18].copy_from_slice(&46u16.to_be_bytes());
        f[22] = 64;
        f[23] = 17;
        f[26..30].copy_from_slice(&[10, 0, 0, 1]);
        f[30..34].copy_from_slice(&[10, 0, 0, 2]);
        f[34..36].copy_from_slice(&1000u16.to_be_bytes());
        f[36..38].copy_from_slice(&2000u16.to_be_bytes());
        f[38..40].copy_from_slice(&26u16.to_be_bytes());
        f
    }

    /// A store with one closed pcap segment of `n` packets (plus a cut tail when `damaged`).
    pub(crate) fn store(n: u64, damaged: bool) -> (tempfile::TempDir, PathBuf) {
        let d = tempfile::tempdir().unwrap();
        let iface = Interface::new(LinkType::ETHERNET, 262_144);
        let mut w = PacketWriter::new(
            Vec::new(),
            FileFormat::Pcap(Precision::Nano),
            std::slice::from_ref(&iface),
        )
        .unwrap();
        for k in 0..n {
            let meta = PacketMeta {
                ts_ns: 1_000_000_000 + k,
                orig_len: 60,
                interface: 0,
            };
            w.write(&meta, &frame()).unwrap();
        }
        let mut bytes = w.finish().unwrap();
        if damaged {
            bytes.extend_from_slice(&[9; 7]);
        }
        let file = "seg-1.pcap".to_string();
        let seg = d.path().join(&file);
        std::fs::write(&seg, &bytes).unwrap();
        Manifest {
            version: 1,
            format: "pcap".into(),
            segment_size: 1 << 20,
            interfaces: vec![InterfaceInfo::from(&iface)],
            segments: vec![SegmentInfo {
                file,
                seq: 1,
                state: SegmentState::Closed,
                first_ns: Some(1_000_000_000),
                last_ns: Some(1_000_000_000 + n.saturating_sub(1)),
                packets: n,
                bytes: bytes.len() as u64,
                drops: 3,
                index_bytes: 0,
            }],
        }
        .save(d.path())
        .unwrap();
        (d, seg)
    }

    #[test]
    fn listing_then_indexing_a_store() {
        let (d, seg) = store(5, false);
        let l = Listing::load(d.path()).unwrap();
        assert_eq!(l.rows.len(), 1);
        assert_eq!(l.rows[0].index, "none");
        assert_eq!((l.packets(), l.drops(), l.index_bytes()), (5, 3, 0));
        // 24-byte header + 5 × (16 + 60).
        assert_eq!(l.data_bytes(), 24 + 5 * 76);
        let j = l.to_json();
        assert_eq!(j["segments"][0]["index"], "none");
        assert_eq!(j["segments"][0]["state"], "closed");
        assert_eq!(j["packets"], 5);

        let r = SegmentRef {
            path: seg.clone(),
            open: false,
            live: false,
        };
        assert_eq!(
            index_action(&r, true, false),
            IndexAction::Build { unfinished: false }
        );
        let mut damage = Vec::new();
        let b = build_index(&r, 4096, &mut |_| {}, &mut |e| damage.push(e))
            .unwrap()
            .unwrap();
        assert!(damage.is_empty());
        assert_eq!(b.packets, 5);
        assert_eq!(b.data_bytes, 24 + 5 * 76);
        assert_eq!(
            b.index_bytes,
            std::fs::metadata(index_path(&seg)).unwrap().len()
        );
        let l = Listing::load(d.path()).unwrap();
        assert!(l.rows[0].index.starts_with("ok ("), "{}", l.rows[0].index);
        assert_eq!(l.index_bytes(), b.index_bytes);
        // Valid now: left alone in a store, rebuilt with force or when given as a file.
        assert_eq!(index_action(&r, true, false), IndexAction::UpToDate);
        assert_eq!(
            index_action(&r, true, true),
            IndexAction::Build { unfinished: false }
        );
        assert_eq!(
            index_action(&r, false, false),
            IndexAction::Build { unfinished: false }
        );
        let live = SegmentRef {
            open: true,
            live: true,
            ..r.clone()
        };
        assert_eq!(
            index_action(&live, true, true),
            IndexAction::LeaveToRecorder
        );
        let stopped = SegmentRef {
            live: false,
            ..live
        };
        assert_eq!(
            index_action(&stopped, true, false),
            IndexAction::Build { unfinished: true }
        );
    }

    #[test]
    fn damage_ends_the_index_and_is_reported() {
        let (_d, seg) = store(3, true);
        let r = SegmentRef {
            path: seg,
            open: false,
            live: false,
        };
        let mut damage = Vec::new();
        let b = build_index(&r, 4096, &mut |_| {}, &mut |e| damage.push(e))
            .unwrap()
            .unwrap();
        assert_eq!(b.packets, 3);
        assert_eq!(damage.len(), 1);
        assert!(
            matches!(damage[0], ReadError::Damaged { offset, .. } if offset == 24 + 3 * 76),
            "{:?}",
            damage[0]
        );
    }

    #[test]
    fn what_is_not_a_store_is_named() {
        let d = tempfile::tempdir().unwrap();
        let e = Listing::load(d.path()).unwrap_err().to_string();
        assert_eq!(
            e,
            format!("{} is not a store (no manifest.json)", d.path().display())
        );
        let f = d.path().join("x.pcap");
        std::fs::write(&f, b"").unwrap();
        assert_eq!(
            Listing::load(&f).unwrap_err().to_string(),
            format!(
                "{} is a file, not a store directory (`weir info` describes capture files)",
                f.display()
            )
        );
        let missing = d.path().join("nope");
        assert!(Listing::load(&missing)
            .unwrap_err()
            .to_string()
            .starts_with(&format!("cannot open {}: ", missing.display())));
    }
}
