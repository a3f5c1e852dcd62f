//! The sizes of a store as a user gives them (segments, writes and retention in MiB, index chunks
//! in KiB), checked together once, before anything is created, and turned into the
//! [`Options`](crate::Options) of a recorder.

use std::path::{Path, PathBuf};

use crate::recorder::Options;

/// Largest write, in MiB: each write of a pcap segment is staged in memory, and a GiB is plenty
/// for any disk.
pub const MAX_WRITE_MIB: u64 = 1024;

/// Smallest index chunk, in KiB.
pub const MIN_INDEX_CHUNK_KIB: u32 = 4;

/// The sizes of a store, in the units of its options.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sizes {
    /// Size of a full segment, in MiB (at least 1).
    pub segment_mib: u64,
    /// Bytes per disk write, in MiB (1 to [`MAX_WRITE_MIB`]).
    pub write_mib: u64,
    /// Retention: the most MiB the store may hold (at least one segment), if any.
    pub max_mib: Option<u64>,
    /// Index chunk size in KiB (at least [`MIN_INDEX_CHUNK_KIB`]); `None`: no index.
    pub index_chunk_kib: Option<u32>,
}

/// Sizes that cannot work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SizeError {
    /// A segment of 0 MiB.
    #[error("the segment size must be at least 1 MiB")]
    SegmentTooSmall,
    /// A segment larger than the filesystem that would hold the store.
    #[error("a segment of {segment_mib} MiB is larger than the filesystem that would hold {} ({filesystem} bytes)", dir.display())]
    SegmentOverFilesystem {
        /// The segment size asked for.
        segment_mib: u64,
        /// The store directory.
        dir: PathBuf,
        /// The filesystem's size in bytes.
        filesystem: u64,
    },
    /// Writes of 0 MiB or more than [`MAX_WRITE_MIB`].
    #[error("the write size must be between 1 and {MAX_WRITE_MIB} MiB")]
    WriteOutOfRange,
    /// Retention that would delete every segment.
    #[error("a store of at most {max_mib} MiB holds less than one segment ({segment_mib} MiB)")]
    RetentionUnderSegment {
        /// The retention limit.
        max_mib: u64,
        /// The segment size.
        segment_mib: u64,
    },
    /// Index chunks under [`MIN_INDEX_CHUNK_KIB`].
    #[error("the index chunk size must be at least {MIN_INDEX_CHUNK_KIB} KiB")]
    IndexChunkTooSmall,
    /// A size whose byte count does not fit (`what` names it: "segment", "write", "retention",
    /// "index chunk").
    #[error("the {what} size {value} is too large")]
    TooLarge {
        /// Which size.
        what: &'static str,
        /// Its value, in its unit.
        value: u64,
    },
}

impl SizeError {
    /// The objection in terms of `weir record`'s options (`--segment-mib`, `--write-mib`,
    /// `--max-mib`, `--index-chunk-kib`).
    pub fn in_options(&self) -> String {
        match self {
            SizeError::SegmentTooSmall => "--segment-mib must be at least 1".into(),
            SizeError::SegmentOverFilesystem {
                segment_mib,
                dir,
                filesystem,
            } => format!(
                "--segment-mib {segment_mib} is larger than the filesystem that would hold {} ({})",
                dir.display(),
                weir_packet::output::human_bytes(*filesystem)
            ),
            SizeError::WriteOutOfRange => "--write-mib must be between 1 and 1024".into(),
            SizeError::RetentionUnderSegment {
                max_mib,
                segment_mib,
            } => format!(
                "--max-mib {max_mib} is smaller than one segment (--segment-mib {segment_mib}): \
                 retention would delete the segment being written"
            ),
            SizeError::IndexChunkTooSmall => "--index-chunk-kib must be at least 4".into(),
            e => e.to_string(),
        }
    }
}

/// The sizes in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Bytes {
    segment: u64,
    write: usize,
    max: Option<u64>,
    index_chunk: Option<u32>,
}

impl Sizes {
    /// Checks the sizes together for a store in `dir` (which need not exist yet): a segment of
    /// at least 1 MiB that fits the filesystem, writes of 1 to [`MAX_WRITE_MIB`] MiB, retention
    /// keeping at least one segment, index chunks of at least [`MIN_INDEX_CHUNK_KIB`] KiB, byte
    /// counts that do not overflow.
    pub fn check(&self, dir: &Path) -> Result<(), SizeError> {
        let b = self.bytes()?;
        if let Ok(fs) = crate::disk::filesystem_size(dir) {
            if b.segment > fs {
                return Err(SizeError::SegmentOverFilesystem {
                    segment_mib: self.segment_mib,
                    dir: dir.to_path_buf(),
                    filesystem: fs,
                });
            }
        }
        Ok(())
    }

    /// The byte counts, checked (all but the filesystem).
    fn bytes(&self) -> Result<Bytes, SizeError> {
        let mib = |v: u64, what: &'static str| {
            v.checked_mul(1 << 20)
                .ok_or(SizeError::TooLarge { what, value: v })
        };
        if self.segment_mib == 0 {
            return Err(SizeError::SegmentTooSmall);
        }
        let segment = mib(self.segment_mib, "segment")?;
        if self.write_mib == 0 || self.write_mib > MAX_WRITE_MIB {
            return Err(SizeError::WriteOutOfRange);
        }
        let write =
            usize::try_from(mib(self.write_mib, "write")?).map_err(|_| SizeError::TooLarge {
                what: "write",
                value: self.write_mib,
            })?;
        let max = match self.max_mib {
            None => None,
            Some(m) if m < self.segment_mib => {
                return Err(SizeError::RetentionUnderSegment {
                    max_mib: m,
                    segment_mib: self.segment_mib,
                })
            }
            Some(m) => Some(mib(m, "retention")?),
        };
        let index_chunk = match self.index_chunk_kib {
            None => None,
            Some(k) if k < MIN_INDEX_CHUNK_KIB => return Err(SizeError::IndexChunkTooSmall),
            Some(k) => Some(k.checked_mul(1024).ok_or(SizeError::TooLarge {
                what: "index chunk",
                value: u64::from(k),
            })?),
        };
        Ok(Bytes {
            segment,
            write,
            max,
            index_chunk,
        })
    }

    /// Sets the sizes of `opts` (segment, write, retention, index chunk), checked as
    /// [`check`](Self::check) does but for the filesystem.
    pub fn apply(&self, opts: &mut Options) -> Result<(), SizeError> {
        let b = self.bytes()?;
        opts.segment_size = b.segment;
        opts.write_size = b.write;
        opts.max_bytes = b.max;
        opts.index_chunk = b.index_chunk;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sizes() -> Sizes {
        Sizes {
            segment_mib: 4,
            write_mib: 1,
            max_mib: Some(8),
            index_chunk_kib: Some(128),
        }
    }

    #[test]
    fn sizes_are_checked_together() {
        let dir = Path::new("/tmp/no-such-store");
        assert_eq!(sizes().check(dir), Ok(()));
        let mut s = sizes();
        s.max_mib = Some(2);
        assert!(matches!(
            s.check(dir),
            Err(SizeError::RetentionUnderSegment { .. })
        ));
        s = sizes();
        s.segment_mib = 0;
        assert_eq!(s.check(dir), Err(SizeError::SegmentTooSmall));
        s = sizes();
        s.segment_mib = 1 << 40;
        s.max_mib = None;
        assert!(matches!(
            s.check(dir),
            Err(SizeError::SegmentOverFilesystem { .. })
        ));
        s = sizes();
        s.write_mib = 0;
        assert_eq!(s.check(dir), Err(SizeError::WriteOutOfRange));
        s = sizes();
        s.index_chunk_kib = Some(2);
        assert_eq!(s.check(dir), Err(SizeError::IndexChunkTooSmall));
        let mut o = Options::new(Vec::new());
        sizes().apply(&mut o).unwrap();
        assert_eq!(
            (o.segment_size, o.write_size, o.max_bytes, o.index_chunk),
            (4 << 20, 1 << 20, Some(8 << 20), Some(128 << 10))
        );
    }
}
