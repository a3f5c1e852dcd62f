//! Segment files on disk: opened with `O_DIRECT` (buffered only where the filesystem refuses it,
//! and then said), space reserved up front with `fallocate` (keeping the visible size at what
//! was written, so a segment being written reads as a valid file up to its last flush), and
//! written only in whole aligned blocks, at aligned offsets, from aligned memory.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;

/// Alignment of every direct write: offset, length and memory address. 4096 covers every
/// logical block size Linux disks use (512 or 4096).
pub const ALIGN: usize = 4096;

/// Rounds `v` down to a multiple of [`ALIGN`].
pub const fn align_down(v: u64) -> u64 {
    v & !(ALIGN as u64 - 1)
}

/// Rounds `v` up to a multiple of [`ALIGN`].
pub const fn align_up(v: u64) -> u64 {
    align_down(v + ALIGN as u64 - 1)
}

/// A zeroed byte buffer whose start is [`ALIGN`]-aligned (a `Vec` over-allocated by one
/// alignment unit and sliced; no unsafe code).
pub struct AlignedBuf {
    raw: Vec<u8>,
    start: usize,
    len: usize,
}

impl AlignedBuf {
    /// `len` zero bytes, aligned.
    pub fn new(len: usize) -> AlignedBuf {
        let raw = vec![0u8; len + ALIGN];
        let start = raw.as_ptr().align_offset(ALIGN);
        AlignedBuf { raw, start, len }
    }

    /// The bytes.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.raw[self.start..self.start + self.len]
    }

    /// Capacity in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// One segment file being written.
pub struct SegmentFile {
    file: File,
    direct: bool,
}

impl SegmentFile {
    /// Creates `path` (which must not exist) and reserves `size` bytes for it. Tries `O_DIRECT`
    /// first; `direct()` says whether it was granted. A failed reservation (disk full) removes
    /// the file again and returns the error.
    pub fn create(path: &Path, size: u64) -> io::Result<SegmentFile> {
        let open = |flags: i32| {
            OpenOptions::new()
                .write(true)
                .read(true)
                .create_new(true)
                .custom_flags(flags)
                .open(path)
        };
        let (file, direct) = match open(libc::O_DIRECT) {
            Ok(f) => (f, true),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => (open(0)?, false),
            Err(e) => return Err(e),
        };
        // SAFETY: plain syscall on a file descriptor we own; no memory is passed.
        let rc = unsafe {
            libc::fallocate(
                file.as_raw_fd(),
                libc::FALLOC_FL_KEEP_SIZE,
                0,
                size as libc::off_t,
            )
        };
        if rc != 0 {
            let e = io::Error::last_os_error();
            // Filesystems without fallocate still work; anything else (ENOSPC) is fatal.
            if !matches!(
                e.raw_os_error(),
                Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS)
            ) {
                drop(file);
                let _ = std::fs::remove_file(path);
                return Err(e);
            }
        }
        Ok(SegmentFile { file, direct })
    }

    /// Opens an existing segment to repair it (buffered).
    pub fn open_existing(path: &Path) -> io::Result<File> {
        OpenOptions::new().read(true).write(true).open(path)
    }

    /// Whether writes bypass the page cache.
    pub fn direct(&self) -> bool {
        self.direct
    }

    /// Writes `parts` back to back at file offset `off`. With `O_DIRECT`, `off`, every part's
    /// length and address must be [`ALIGN`]-aligned (the recorder guarantees it).
    pub fn write_at(&self, mut off: u64, parts: &[&[u8]]) -> io::Result<()> {
        for p in parts {
            debug_assert!(
                !self.direct
                    || (off % ALIGN as u64 == 0
                        && p.len() % ALIGN == 0
                        && p.as_ptr() as usize % ALIGN == 0),
                "unaligned direct write at {off}, {} bytes",
                p.len()
            );
            self.file.write_all_at(p, off)?;
            off += p.len() as u64;
        }
        Ok(())
    }

    /// Sets the file's length.
    pub fn truncate(&self, len: u64) -> io::Result<()> {
        self.file.set_len(len)
    }

    /// Makes the data and the length durable.
    pub fn sync(&self) -> io::Result<()> {
        self.file.sync_data()
    }
}

/// The total size of the filesystem that holds `path`, or would hold it: its nearest existing
/// ancestor's (a store directory may not exist yet).
pub fn filesystem_size(path: &Path) -> io::Result<u64> {
    let mut p = path;
    let existing = loop {
        if p.exists() {
            break p;
        }
        match p.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => p = parent,
            _ => break Path::new("."),
        }
    };
    let c = std::ffi::CString::new(existing.as_os_str().as_encoded_bytes())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    // SAFETY: an all-zero statvfs is a valid value of this plain C struct.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a NUL-terminated path and `st` a valid statvfs to fill in.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((st.f_blocks as u64).saturating_mul(st.f_frsize as u64))
}

/// Writes `bytes` to `path` atomically (an index or an index part): a temporary file beside it,
/// synced, renamed over it, so a reader or a kill -9 never meets half a file.
pub(crate) fn write_renamed(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    std::fs::write(&tmp, bytes)?;
    std::fs::File::open(&tmp)?.sync_all()?;
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_buffers_and_rounding() {
        for len in [0, 1, 4096, 10_000] {
            let mut b = AlignedBuf::new(len);
            assert_eq!(b.bytes_mut().as_ptr() as usize % ALIGN, 0);
            assert_eq!(b.bytes_mut().len(), len);
        }
        assert_eq!(align_down(4095), 0);
        assert_eq!(align_up(1), 4096);
        assert_eq!(align_up(8192), 8192);
    }
}
