//! The buffer's bytes are a pcapng file's bytes: a Section Header Block and one Interface
//! Description Block (ns timestamps) followed by every released batch, written as is, including
//! the padding blocks made at each wrap, read back by weir's own reader and by tshark and
//! capinfos (skipped when missing unless `WEIR_REQUIRE_PEERS` is set).
#![cfg(not(loom))]

use std::process::Command;

use weir_buffer::{pcapng, Config};
use weir_testkit::have;

/// 2026-11-21T10:20:30Z in ns.
const T0: u64 = 1_795_256_430_000_000_000;

/// SHB (host byte order) and an Ethernet IDB with `if_tsresol = 9`.
fn file_head() -> Vec<u8> {
    let mut v = Vec::new();
    for w in [0x0A0D_0D0Au32, 28, 0x1A2B_3C4D] {
        v.extend_from_slice(&w.to_ne_bytes());
    }
    v.extend_from_slice(&1u16.to_ne_bytes());
    v.extend_from_slice(&0u16.to_ne_bytes());
    v.extend_from_slice(&(-1i64).to_ne_bytes());
    v.extend_from_slice(&28u32.to_ne_bytes());
    for w in [1u32, 32] {
        v.extend_from_slice(&w.to_ne_bytes());
    }
    v.extend_from_slice(&1u16.to_ne_bytes()); // LINKTYPE_ETHERNET
    v.extend_from_slice(&0u16.to_ne_bytes());
    v.extend_from_slice(&0u32.to_ne_bytes()); // snaplen: none
    v.extend_from_slice(&9u16.to_ne_bytes()); // if_tsresol
    v.extend_from_slice(&1u16.to_ne_bytes());
    v.extend_from_slice(&[9, 0, 0, 0]);
    v.extend_from_slice(&[0, 0, 0, 0]); // opt_endofopt
    v.extend_from_slice(&32u32.to_ne_bytes());
    v
}

/// An Ethernet/IPv4/UDP frame of `len` bytes (≥ 42) whose payload starts with `n`.
fn frame(n: u64, len: usize) -> Vec<u8> {
    let mut f = vec![0u8; len];
    f[..6].copy_from_slice(&[2, 0, 0, 0, 0, 2]);
    f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    let ip_len = (len - 14) as u16;
    f[14] = 0x45;
    f[16..18].copy_from_slice(&ip_len.to_be_bytes());
    f[22] = 64;
    f[23] = 17;
    f[26..30].copy_from_slice(&[10, 0, 0, 1]);
    f[30..34].copy_from_slice(&[10, 0, 0, 2]);
    let mut sum = 0u32;
    for i in (14..34).step_by(2) {
        sum += u32::from(u16::from_be_bytes([f[i], f[i + 1]]));
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    f[24..26].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    f[34..36].copy_from_slice(&4000u16.to_be_bytes());
    f[36..38].copy_from_slice(&5000u16.to_be_bytes());
    f[38..40].copy_from_slice(&(ip_len - 20).to_be_bytes());
    f[42..50.min(len)].copy_from_slice(&n.to_be_bytes()[..(len - 42).min(8)]);
    f
}

#[test]
fn released_batches_form_a_pcapng_file_peers_read() {
    let buf = Config::new(1 << 14)
        .max_writers(2)
        .max_caplen(1514)
        .huge_pages(false)
        .prefault(false)
        .build()
        .unwrap();
    let mut w = buf.writer().unwrap();
    let mut r = buf.reader(0).unwrap();
    let mut file = file_head();
    let count = 600u64;
    let lens: Vec<usize> = (0..count as usize).map(|i| 42 + (i * 37) % 1473).collect();
    for n in 0..count {
        let f = frame(n, lens[n as usize]);
        w.push(0, T0 + n * 1_000_123, f.len() as u32 + (n % 2) as u32, &f)
            .unwrap();
        if n % 5 == 4 || n == count - 1 {
            let batch = r.next_batch().unwrap();
            let (a, b) = batch.bytes();
            file.extend_from_slice(a);
            file.extend_from_slice(b);
            batch.release();
        }
    }
    // A recorder padding the end of a segment: one chained gap, written with the public helper.
    let mut pad = vec![0u8; 64];
    pcapng::write_padding(&mut pad, T0);
    file.extend_from_slice(&pad);
    let stats = buf.stats();
    assert!(stats.padding >= 10, "the run wrapped many times: {stats:?}");

    let mut reader = weir_pcap::FileReader::from_bytes("buffer.pcapng", file.clone()).unwrap();
    let mut n = 0u64;
    while let Some(p) = reader.next_packet().unwrap() {
        assert_eq!(p.data, &frame(n, lens[n as usize])[..]);
        assert_eq!(p.meta.ts_ns, T0 + n * 1_000_123);
        assert_eq!(p.meta.orig_len, p.data.len() as u32 + (n % 2) as u32);
        n += 1;
    }
    assert_eq!(n, count);

    let dir = std::env::temp_dir().join(format!("weir-buffer-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("buffer.pcapng");
    std::fs::write(&path, &file).unwrap();
    if have("tshark") {
        let out = Command::new("tshark")
            .args([
                "-r",
                path.to_str().unwrap(),
                "-T",
                "fields",
                "-e",
                "frame.len",
                "-e",
                "udp.dstport",
            ])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "tshark: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8(out.stdout).unwrap();
        let rows: Vec<&str> = text.lines().collect();
        assert_eq!(
            rows.len() as u64,
            count,
            "tshark lists every packet and no padding"
        );
        for (i, row) in rows.iter().enumerate() {
            let want = format!("{}\t5000", lens[i] + i % 2);
            assert_eq!(*row, want, "frame {}", i + 1);
        }
    }
    if have("capinfos") {
        let out = Command::new("capinfos")
            .args(["-c", "-M"])
            .arg(&path)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains(&format!("Number of packets:   {count}")),
            "{text}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
