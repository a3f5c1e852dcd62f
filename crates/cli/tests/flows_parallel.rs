//! `weir flows` on one large file reads it in parallel byte ranges; the records must be exactly
//! those of the sequential path. `WEIR_PARALLEL_MIN_BYTES` forces one path or the other.

mod common;

use std::path::Path;

use common::{corpus, run, weir};

#[test]
fn parallel_metering_equals_sequential() {
    let tmp = tempfile::tempdir().unwrap();
    // All Ethernet corpus files merged in time order by mergecap into one pcap. (Time order
    // matters: with several workers, each shard expires flows by its own clock, so on input whose
    // clock runs backwards the records depend on the per-run hash seed; see `--seed`.)
    let big = tmp.path().join("all.pcap");
    let mut cmd = std::process::Command::new("mergecap");
    cmd.args(["-F", "pcap", "-w"]).arg(&big);
    for f in corpus() {
        let b = std::fs::read(&f).unwrap();
        if b.len() > 24 && b[..4] == [0xd4, 0xc3, 0xb2, 0xa1] && b[20..24] == [1, 0, 0, 0] {
            cmd.arg(f);
        }
    }
    let r = run(&mut cmd);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let flows_of = |file: &Path, min: &str, workers: &str, extra: &[&str]| {
        let out = run(weir()
            .env("WEIR_PARALLEL_MIN_BYTES", min)
            .env("WEIR_LOG", "debug")
            .args(["flows", "--workers", workers, "--json", "-", "-r"])
            .arg(file)
            .args(extra));
        let log = String::from_utf8_lossy(&out.stderr).into_owned();
        (
            String::from_utf8(out.stdout).unwrap(),
            log,
            out.status.code(),
        )
    };
    let flows = |min: &str, workers: &str, extra: &[&str]| {
        let (out, log, code) = flows_of(&big, min, workers, extra);
        assert_eq!(code, Some(0), "{log}");
        (out, log)
    };
    let sorted = |s: &str| {
        let mut v: Vec<&str> = s.lines().collect();
        v.sort_unstable();
        v.join("\n")
    };
    for extra in [&[][..], &["--biflow"][..], &["tcp or udp"][..]] {
        let mut first: Option<String> = None;
        for workers in ["1", "2"] {
            let (seq, seq_log) = flows("99999999999999", workers, extra);
            assert!(
                !seq_log.contains("ranges"),
                "sequential run stayed sequential"
            );
            assert!(
                seq.lines().count() > 1000,
                "{} records",
                seq.lines().count()
            );
            let (par, par_log) = flows("0", workers, extra);
            if std::thread::available_parallelism().map_or(1, |n| n.get()) >= 2 {
                assert!(par_log.contains("ranges"), "parallel path taken: {par_log}");
            }
            // With one worker the order is deterministic; with several, shards interleave.
            if workers == "1" {
                assert!(par == seq, "{extra:?}: records differ");
            }
            assert!(
                sorted(&par) == sorted(&seq),
                "{extra:?} with {workers} workers"
            );
            // And the worker count changes nothing but the order.
            let all = sorted(&par);
            match &first {
                None => first = Some(all),
                Some(f) => assert!(*f == all, "{extra:?}: 1 vs {workers} workers differ"),
            }
        }
    }
    // Damage: a record header in the middle claims 4 GB, and the file is cut inside its last
    // record. The range holding the bad header stops there, the later ranges are dropped and
    // the rest is read sequentially from the bad header, which stops the input just as the
    // sequential path does: the same records and the same exit status. (The cut last range
    // falls back too, and meets the cut at once.)
    let mut bytes = std::fs::read(&big).unwrap();
    let mut at = 24;
    while at < bytes.len() / 2 {
        let incl = u32::from_le_bytes(bytes[at + 8..at + 12].try_into().unwrap());
        at += 16 + incl as usize;
    }
    bytes[at + 8..at + 12].copy_from_slice(&0xffff_fff0u32.to_le_bytes());
    let bad = tmp.path().join("bad.pcap");
    std::fs::write(&bad, &bytes[..bytes.len() - 7]).unwrap();
    let cut = tmp.path().join("cut.pcap");
    std::fs::write(&cut, &std::fs::read(&big).unwrap()[..bytes.len() * 7 / 8]).unwrap();
    for file in [&bad, &cut] {
        for workers in ["1", "2"] {
            let (seq, seq_log, seq_code) = flows_of(file, "99999999999999", workers, &[]);
            let (par, par_log, par_code) = flows_of(file, "0", workers, &[]);
            assert_ne!(seq_code, Some(0), "damage is reported: {seq_log}");
            assert_eq!(seq_code, par_code, "{par_log}");
            assert!(seq.lines().count() > 100, "{seq_log}");
            if std::thread::available_parallelism().map_or(1, |n| n.get()) >= 2 {
                assert!(par_log.contains("reading on sequentially"), "{par_log}");
            }
            if workers == "1" {
                assert!(par == seq, "{}: records differ", file.display());
            }
            assert!(
                sorted(&par) == sorted(&seq),
                "{} with {workers} workers",
                file.display()
            );
        }
    }
}
