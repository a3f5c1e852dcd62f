//! Helpers shared by the filter crate's integration tests: building small pcap files, running
//! tcpdump, and reading capture headers.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A directory for this test process's files, removed on drop.
pub(crate) struct TempDir(pub PathBuf);

impl TempDir {
    pub(crate) fn new(tag: &str) -> TempDir {
        static N: AtomicUsize = AtomicUsize::new(0);
        let p = std::env::temp_dir().join(format!(
            "weir-filter-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
    pub(crate) fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Writes a classic pcap file (µs timestamps). `big_endian` picks the writer's byte order.
pub(crate) fn write_pcap(
    path: &Path,
    linktype: u32,
    snaplen: u32,
    big_endian: bool,
    packets: &[(Vec<u8>, u32)],
) {
    let w32 = |v: u32| {
        if big_endian {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        }
    };
    let w16 = |v: u16| {
        if big_endian {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        }
    };
    let mut out = Vec::new();
    out.extend_from_slice(&w32(0xa1b2_c3d4));
    out.extend_from_slice(&w16(2));
    out.extend_from_slice(&w16(4));
    out.extend_from_slice(&w32(0));
    out.extend_from_slice(&w32(0));
    out.extend_from_slice(&w32(snaplen));
    out.extend_from_slice(&w32(linktype));
    for (i, (data, wire)) in packets.iter().enumerate() {
        out.extend_from_slice(&w32(1_700_000_000 + i as u32));
        out.extend_from_slice(&w32(0));
        out.extend_from_slice(&w32(data.len() as u32));
        out.extend_from_slice(&w32(*wire));
        out.extend_from_slice(data);
    }
    std::fs::write(path, out).unwrap();
}

/// True when a `tcpdump` binary runs here; when it does not, the caller skips with a note, or
/// this panics if `WEIR_REQUIRE_PEERS` is set (see `weir_testkit`).
#[track_caller]
pub(crate) fn have_tcpdump() -> bool {
    weir_testkit::have("tcpdump")
}

/// `tcpdump -r FILE -d EXPR`: the listing, or tcpdump's error message without the `tcpdump: `
/// prefix.
pub(crate) fn tcpdump_listing(file: &Path, expr: &str) -> Result<String, String> {
    let out = Command::new("tcpdump")
        .arg("-r")
        .arg(file)
        .arg("-d")
        .arg("--")
        .arg(expr)
        .output()
        .unwrap();
    if out.status.success() {
        Ok(String::from_utf8(out.stdout).unwrap())
    } else {
        Err(tcpdump_error(&out.stderr))
    }
}

/// The last `tcpdump: ` line of tcpdump's stderr, prefix removed.
pub(crate) fn tcpdump_error(stderr: &[u8]) -> String {
    let text = String::from_utf8_lossy(stderr);
    text.lines()
        .filter_map(|l| l.strip_prefix("tcpdump: "))
        .next_back()
        .unwrap_or_else(|| panic!("no tcpdump error in {text:?}"))
        .to_string()
}

/// Counts the packets of a classic pcap byte stream (what `tcpdump -w -` writes).
pub(crate) fn count_pcap_records(bytes: &[u8]) -> usize {
    assert!(bytes.len() >= 24, "short pcap stream");
    let magic = u32::from_le_bytes(bytes[0..4].try_into().unwrap());
    let le = matches!(magic, 0xa1b2_c3d4 | 0xa1b2_3c4d);
    let rd = |o: usize| {
        let b: [u8; 4] = bytes[o..o + 4].try_into().unwrap();
        if le {
            u32::from_le_bytes(b)
        } else {
            u32::from_be_bytes(b)
        }
    };
    let (mut off, mut n) = (24, 0);
    while off + 16 <= bytes.len() {
        off += 16 + rd(off + 8) as usize;
        n += 1;
    }
    n
}

/// What a capture file's header says: LINKTYPE, snapshot length, and whether its byte order is
/// the opposite of this machine's. For pcapng, the first interface's values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct FileInfo {
    pub linktype: u32,
    pub snaplen: u32,
    pub swapped: bool,
}

pub(crate) fn file_info(bytes: &[u8]) -> Option<FileInfo> {
    if bytes.len() < 24 {
        return None;
    }
    let native_le = cfg!(target_endian = "little");
    let le_magic = u32::from_le_bytes(bytes[0..4].try_into().unwrap());
    let be_magic = u32::from_be_bytes(bytes[0..4].try_into().unwrap());
    let is_classic = |m: u32| matches!(m, 0xa1b2_c3d4 | 0xa1b2_3c4d);
    let u32_at = |o: usize, le: bool| {
        let b: [u8; 4] = bytes.get(o..o + 4)?.try_into().ok()?;
        Some(if le {
            u32::from_le_bytes(b)
        } else {
            u32::from_be_bytes(b)
        })
    };
    let u16_at = |o: usize, le: bool| {
        let b: [u8; 2] = bytes.get(o..o + 2)?.try_into().ok()?;
        Some(if le {
            u16::from_le_bytes(b)
        } else {
            u16::from_be_bytes(b)
        })
    };
    if is_classic(le_magic) || is_classic(be_magic) {
        let le = is_classic(le_magic);
        return Some(FileInfo {
            linktype: u32_at(20, le)?,
            snaplen: u32_at(16, le)?,
            swapped: le != native_le,
        });
    }
    if le_magic == 0x0a0d_0d0a {
        // pcapng: section header, then blocks until the first interface description block.
        let bom = u32_at(8, true)?;
        let le = match bom {
            0x1a2b_3c4d => true,
            0x4d3c_2b1a => false,
            _ => return None,
        };
        let mut off = 0usize;
        loop {
            let kind = u32_at(off, le)?;
            let len = u32_at(off + 4, le)? as usize;
            if kind == 1 {
                return Some(FileInfo {
                    linktype: u32::from(u16_at(off + 8, le)?),
                    snaplen: u32_at(off + 12, le)?,
                    swapped: le != native_le,
                });
            }
            if len < 12 {
                return None;
            }
            off += len;
        }
    }
    None
}
