//! A store: one directory of segment files plus its manifest. Opening a store takes an
//! exclusive lock on it (one recorder per directory), repairs what a crash left behind (every
//! segment not known to be closed is scanned and cut after its last whole block), and
//! reconciles the manifest with the files present. Retention deletes the oldest closed segments.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use weir_packet::Utc;

use crate::manifest::{Manifest, SegmentInfo, SegmentState};
use crate::scan::{scan_pcap, scan_pcapng, Scan};
use crate::{Format, RecordError};

/// A store directory opened for recording.
#[derive(Debug)]
pub struct Store {
    dir: PathBuf,
    /// The manifest as it is now (segments oldest first).
    pub manifest: Manifest,
    format: Format,
    max_caplen: u32,
    next_seq: u64,
    _lock: File,
}

/// What opening a store repaired.
#[derive(Debug, Clone, Default)]
pub struct Recovery {
    /// Segments scanned because they were not known to be closed, with the bytes cut off each.
    pub repaired: Vec<(String, u64)>,
    /// Manifest entries whose file was gone.
    pub missing: Vec<String>,
    /// Segments that held no packet after repair (a recorder killed before its first write to
    /// them), deleted with their index.
    pub removed: Vec<String>,
}

/// The exclusive lock on a store directory: one recorder per directory. `weir record` takes it
/// before anything else (before it allocates its buffer or says it is recording), so a second
/// recorder fails at once.
#[derive(Debug)]
pub struct StoreLock {
    dir: PathBuf,
    file: File,
    created: bool,
}

impl StoreLock {
    /// Creates `dir` if needed and locks it. A lock held by a reader probing it
    /// ([`recorder_running`]) is waited for briefly; one held by a recorder is an error.
    pub fn take(dir: &Path) -> Result<StoreLock, RecordError> {
        let io = |what: &str, e: std::io::Error| RecordError::Io(format!("{what}: {e}"));
        let created = !dir.exists();
        weir_packet::output::create_dir(dir)
            .map_err(|e| io(&format!("create {}", dir.display()), e))?;
        let file = File::create(dir.join(".lock"))
            .map_err(|e| io(&format!("lock {}", dir.display()), e))?;
        let mut tries = 0;
        // SAFETY: plain syscall on a descriptor we own.
        while unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            tries += 1;
            if tries > 20 {
                return Err(RecordError::Locked(dir.to_path_buf()));
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        Ok(StoreLock {
            dir: dir.to_path_buf(),
            file,
            created,
        })
    }

    /// Gives the lock up after a start that failed before the store was opened: removes the
    /// directory again when taking the lock created it (and nothing else was put in it).
    pub fn abandon(self) {
        if self.created {
            let _ = std::fs::remove_file(self.dir.join(".lock"));
            let _ = std::fs::remove_dir(&self.dir);
        }
    }
}

/// Whether a recorder holds the store in `dir` right now. The probe takes a shared lock for an
/// instant; a recorder starting at that instant waits for it ([`StoreLock::take`]).
pub fn recorder_running(dir: &Path) -> bool {
    let Ok(f) = File::open(dir.join(".lock")) else {
        return false;
    };
    // SAFETY: plain syscalls on a descriptor we own.
    unsafe {
        if libc::flock(f.as_raw_fd(), libc::LOCK_SH | libc::LOCK_NB) == 0 {
            libc::flock(f.as_raw_fd(), libc::LOCK_UN);
            return false;
        }
    }
    std::io::Error::last_os_error().raw_os_error() == Some(libc::EWOULDBLOCK)
}

/// The file name of a segment: its start time (UTC, to the ns), then its sequence number, so
/// names sort by time and never collide.
pub fn segment_name(first_ns: u64, seq: u64, format: Format) -> String {
    let u = Utc::from_ns(first_ns);
    format!(
        "{:04}{:02}{:02}T{:02}{:02}{:02}.{:09}Z-{seq:06}.{}",
        u.year,
        u.month,
        u.day,
        u.hour,
        u.minute,
        u.second,
        u.nanos,
        format.extension()
    )
}

/// The sequence number of a segment file name, if it is one of ours.
fn parse_seq(name: &str) -> Option<(u64, Format)> {
    let (stem, ext) = name.rsplit_once('.')?;
    let format = match ext {
        "pcapng" => Format::Pcapng,
        "pcap" => Format::Pcap,
        _ => return None,
    };
    let (time, seq) = stem.rsplit_once('-')?;
    if !time.ends_with('Z') || seq.len() < 6 {
        return None;
    }
    Some((seq.parse().ok()?, format))
}

impl Store {
    /// Opens (creating it if needed) the store in `dir` for recording in `format`.
    pub fn open(
        dir: &Path,
        format: Format,
        segment_size: u64,
        max_caplen: u32,
    ) -> Result<(Store, Recovery), RecordError> {
        Store::open_locked(StoreLock::take(dir)?, format, segment_size, max_caplen)
    }

    /// [`open`](Self::open) with the lock already taken.
    pub fn open_locked(
        lock: StoreLock,
        format: Format,
        segment_size: u64,
        max_caplen: u32,
    ) -> Result<(Store, Recovery), RecordError> {
        let io = |what: &str, e: std::io::Error| RecordError::Io(format!("{what}: {e}"));
        let dir = lock.dir.as_path();
        let mut manifest = Manifest::load(dir)
            .map_err(|e| io("read the manifest", e))?
            .unwrap_or(Manifest {
                version: 1,
                format: format.name().into(),
                segment_size,
                ..Manifest::default()
            });
        if manifest.format != format.name() && !manifest.segments.is_empty() {
            return Err(RecordError::Config(format!(
                "{} holds {} segments; record {} elsewhere or choose --format {}",
                dir.display(),
                manifest.format,
                format.name(),
                manifest.format
            )));
        }
        manifest.format = format.name().into();
        manifest.segment_size = segment_size;
        let mut store = Store {
            dir: dir.to_path_buf(),
            manifest,
            format,
            max_caplen,
            next_seq: 1,
            _lock: lock.file,
        };
        let recovery = store.reconcile()?;
        store.save()?;
        Ok((store, recovery))
    }

    /// The store directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Brings the manifest in line with the files: repairs every segment not known to be
    /// closed (and every segment file the manifest does not list), forgets missing files.
    fn reconcile(&mut self) -> Result<Recovery, RecordError> {
        let mut rec = Recovery::default();
        let mut files = Vec::new();
        let entries = std::fs::read_dir(&self.dir)
            .map_err(|e| RecordError::Io(format!("list {}: {e}", self.dir.display())))?;
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if let Some((seq, format)) = parse_seq(&name) {
                if format == self.format {
                    files.push((seq, name));
                }
            }
        }
        files.sort();
        let known: std::collections::HashMap<String, SegmentInfo> = self
            .manifest
            .segments
            .drain(..)
            .map(|s| (s.file.clone(), s))
            .collect();
        for name in known.keys() {
            if !files.iter().any(|(_, f)| f == name) {
                tracing::warn!("segment {name} listed in the manifest is missing");
                rec.missing.push(name.clone());
            }
        }
        for (seq, name) in files {
            let path = self.dir.join(&name);
            let len = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
            let trusted = known
                .get(&name)
                .filter(|s| s.state != SegmentState::Open && s.bytes == len);
            let info = match trusted {
                Some(s) => s.clone(),
                None => {
                    let scan = self.repair(&path)?;
                    self.next_seq = self.next_seq.max(seq + 1);
                    if scan.packets == 0 {
                        tracing::info!("{}: no packet in it; deleted", path.display());
                        std::fs::remove_file(&path).map_err(|e| {
                            RecordError::Io(format!("delete {}: {e}", path.display()))
                        })?;
                        let _ = std::fs::remove_file(weir_index::index_path(&path));
                        weir_index::remove_parts(&path);
                        rec.removed.push(name);
                        continue;
                    }
                    let cut = scan.file_len - scan.valid_len;
                    if cut > 0
                        || known
                            .get(&name)
                            .is_none_or(|s| s.state == SegmentState::Open)
                    {
                        rec.repaired.push((name.clone(), cut));
                    }
                    SegmentInfo {
                        file: name.clone(),
                        seq,
                        state: SegmentState::Recovered,
                        first_ns: scan.first_ns,
                        last_ns: scan.last_ns,
                        packets: scan.packets,
                        bytes: scan.valid_len,
                        drops: known.get(&name).map_or(0, |s| s.drops),
                        index_bytes: crate::inventory::index_files_bytes(&path),
                    }
                }
            };
            self.next_seq = self.next_seq.max(seq + 1);
            self.manifest.segments.push(info);
        }
        Ok(rec)
    }

    /// Scans one segment and cuts it after its last whole block.
    fn repair(&self, path: &Path) -> Result<Scan, RecordError> {
        let io = |e: std::io::Error| RecordError::Io(format!("repair {}: {e}", path.display()));
        let file = crate::disk::SegmentFile::open_existing(path).map_err(io)?;
        let scan = match self.format {
            Format::Pcapng => scan_pcapng(file.try_clone().map_err(io)?),
            Format::Pcap => scan_pcap(file.try_clone().map_err(io)?, self.max_caplen),
        }
        .map_err(io)?;
        if scan.valid_len < scan.file_len {
            tracing::warn!(
                "{}: cut {} bytes of unfinished tail after a crash",
                path.display(),
                scan.file_len - scan.valid_len
            );
            file.set_len(scan.valid_len).map_err(io)?;
            file.sync_all().map_err(io)?;
            // An index covering what was cut is stale: without it, `weir index` rebuilds it and
            // extract scans the segment meanwhile.
            let idx = weir_index::index_path(path);
            let stale = std::fs::read(&idx)
                .ok()
                .and_then(|b| weir_index::Index::parse(&b).ok())
                .is_some_and(|ix| ix.covered_len > scan.valid_len);
            if stale {
                let _ = std::fs::remove_file(&idx);
            }
        }
        tidy_parts(path, scan.valid_len);
        Ok(scan)
    }

    /// Takes the next sequence number.
    pub fn take_seq(&mut self) -> u64 {
        let s = self.next_seq;
        self.next_seq += 1;
        s
    }

    /// Writes the manifest.
    pub fn save(&self) -> Result<(), RecordError> {
        self.manifest
            .save(&self.dir)
            .map_err(|e| RecordError::Io(format!("write the manifest: {e}")))
    }

    /// Adds or replaces the entry of a segment (by file name).
    pub fn put(&mut self, info: SegmentInfo) {
        match self
            .manifest
            .segments
            .iter_mut()
            .find(|s| s.file == info.file)
        {
            Some(s) => *s = info,
            None => self.manifest.segments.push(info),
        }
    }

    /// Forgets a segment (its file is already gone or about to be).
    pub fn forget(&mut self, file: &str) {
        self.manifest.segments.retain(|s| s.file != file);
    }

    /// Deletes the oldest finished segments while the store holds more than `max_bytes`, and
    /// those whose last packet is older than `max_age_ns` before `now_ns`. The segment being
    /// written is never deleted. Returns the names deleted.
    pub fn apply_retention(
        &mut self,
        max_bytes: Option<u64>,
        max_age_ns: Option<u64>,
        now_ns: u64,
    ) -> Vec<String> {
        let mut total: u64 = self.manifest.segments.iter().map(|s| s.bytes).sum();
        let mut deleted = Vec::new();
        let mut keep = Vec::new();
        for s in std::mem::take(&mut self.manifest.segments) {
            let finished = s.state != SegmentState::Open;
            let too_big = max_bytes.is_some_and(|m| total > m);
            let too_old = max_age_ns.is_some_and(|age| {
                s.last_ns
                    .is_none_or(|last| now_ns.saturating_sub(last) > age)
            });
            if finished && (too_big || too_old) {
                match std::fs::remove_file(self.dir.join(&s.file)) {
                    Ok(()) => {
                        let seg = self.dir.join(&s.file);
                        let _ = std::fs::remove_file(weir_index::index_path(&seg));
                        weir_index::remove_parts(&seg);
                        total -= s.bytes;
                        deleted.push(s.file);
                        continue;
                    }
                    Err(e) => tracing::warn!("retention: cannot delete {}: {e}", s.file),
                }
            }
            keep.push(s);
        }
        self.manifest.segments = keep;
        deleted
    }
}

/// After a crash, the index parts of segment `path` (now `len` bytes): all of them when its
/// final index exists (a kill between its rename and the parts' unlink), else those that
/// cannot be used (damaged, or covering what the repair cut); the others stay, and readers
/// use them until `weir index` writes the final index.
fn tidy_parts(path: &Path, len: u64) {
    if weir_index::index_path(path).exists() {
        weir_index::remove_parts(path);
        return;
    }
    let Ok((head, _)) = crate::select::head_of(path) else {
        return;
    };
    for (p, e) in weir_index::Parts::load(path, &head, len).damaged() {
        tracing::warn!("{}: removed: {e}", p.display());
        let _ = std::fs::remove_file(p);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_sort_by_time_and_parse_back() {
        let a = segment_name(1_700_000_000_000_000_123, 7, Format::Pcapng);
        assert_eq!(a, "20231114T221320.000000123Z-000007.pcapng");
        assert_eq!(parse_seq(&a), Some((7, Format::Pcapng)));
        let b = segment_name(1_700_000_001_000_000_000, 8, Format::Pcap);
        assert!(a < b);
        assert_eq!(parse_seq(&b), Some((8, Format::Pcap)));
        assert_eq!(parse_seq("manifest.json"), None);
        assert_eq!(parse_seq("x-1.pcap"), None);
    }
}
