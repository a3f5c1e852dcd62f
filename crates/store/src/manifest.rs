//! The store's manifest, `DIR/manifest.json`: which segments exist, their time spans, packets,
//! sizes and the drops counted while each was written, and the interfaces and format of the
//! store. It is small and rewritten whole (to a temporary file, then renamed over the old one),
//! so a crash leaves either the old or the new manifest, never a torn one; the segments
//! themselves are the truth, and the recorder rebuilds entries from them after a crash.

use std::io::Write;
use std::path::Path;

use serde::{Deserialize, Serialize};

/// Name of the manifest file in a store directory.
pub const MANIFEST: &str = "manifest.json";

/// The whole manifest.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct Manifest {
    /// Layout version of this file (1).
    pub version: u32,
    /// `pcapng` or `pcap`.
    pub format: String,
    /// Size of a full segment, in bytes.
    pub segment_size: u64,
    /// The interfaces of the latest run, in interface-id order.
    pub interfaces: Vec<InterfaceInfo>,
    /// Segments, oldest first.
    pub segments: Vec<SegmentInfo>,
}

/// One capture interface.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct InterfaceInfo {
    /// Its name (`eth0`), when known.
    pub name: Option<String>,
    /// Its link type (LINKTYPE_ value).
    pub link: u32,
    /// Snap length.
    pub snaplen: u32,
}

impl From<&weir_packet::Interface> for InterfaceInfo {
    fn from(i: &weir_packet::Interface) -> InterfaceInfo {
        InterfaceInfo {
            name: i.name.clone(),
            link: i.link.0,
            snaplen: i.snaplen,
        }
    }
}

impl From<&InterfaceInfo> for weir_packet::Interface {
    fn from(i: &InterfaceInfo) -> weir_packet::Interface {
        weir_packet::Interface {
            name: i.name.clone(),
            ..weir_packet::Interface::new(weir_packet::LinkType(i.link), i.snaplen)
        }
    }
}

/// Where a segment is in its life.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum SegmentState {
    /// Being written (or the recorder died while writing it: recovery checks it).
    Open,
    /// Finished and synced.
    Closed,
    /// Repaired after a crash (its partial tail trimmed).
    Recovered,
}

/// One segment file.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct SegmentInfo {
    /// File name inside the store directory.
    pub file: String,
    /// Sequence number (names sort by time, then by this).
    pub seq: u64,
    /// Its state.
    pub state: SegmentState,
    /// Timestamp of its first packet, ns since the epoch.
    pub first_ns: Option<u64>,
    /// Timestamp of its last packet.
    pub last_ns: Option<u64>,
    /// Packets in it.
    pub packets: u64,
    /// File size in bytes.
    pub bytes: u64,
    /// Packets dropped (kernel, buffer and writer together) while it was the segment being
    /// written.
    pub drops: u64,
    /// Size of its index file (`FILE.idx`), 0 when it has none.
    #[serde(default)]
    pub index_bytes: u64,
}

impl Manifest {
    /// Reads `dir/manifest.json`; `Ok(None)` when there is none.
    pub fn load(dir: &Path) -> std::io::Result<Option<Manifest>> {
        let path = dir.join(MANIFEST);
        match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|e| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("{}: {e}", path.display()),
                )
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Writes `dir/manifest.json` atomically (temporary file, fsync, rename).
    pub fn save(&self, dir: &Path) -> std::io::Result<()> {
        let tmp = dir.join(".manifest.json.tmp");
        let mut f = std::fs::File::create(&tmp)?;
        let mut text = serde_json::to_vec_pretty(self).map_err(std::io::Error::other)?;
        text.push(b'\n');
        f.write_all(&text)?;
        f.sync_data()?;
        std::fs::rename(&tmp, dir.join(MANIFEST))
    }
}
