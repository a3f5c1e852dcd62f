//! weir against tcpdump on the whole corpus.
//!
//! 1. Reading: `weir read --micro -r F -w A` and `tcpdump -r F -w B` must write byte-identical
//!    files for every corpus file, damaged ones included (both keep every packet before the damage
//!    and both fail), and agree on success or failure.
//! 2. Filtering: for every expression of `crates/filter/tests/expressions.txt` and every link type
//!    in the corpus, `weir read --micro -r F1 -r F2 ... -w A EXPR` and
//!    `tcpdump -V LIST -w B EXPR` must write byte-identical files (or both refuse the expression).
//!
//! `--micro` makes weir write what tcpdump writes (microsecond pcap); byte equality then checks
//! packets, lengths, timestamps and order at once, also for records whose sub-second field is
//! out of range (µs ≥ 10^6, seen in one corpus file): weir copies the fields as stored, as
//! libpcap does.

mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

use common::{corpus, expressions, run, weir};

fn link_type(file: &std::path::Path) -> Option<u32> {
    let b = std::fs::read(file).ok()?;
    let m = u32::from_le_bytes(b.get(..4)?.try_into().ok()?);
    let lt = u32::from_le_bytes(b.get(20..24)?.try_into().ok()?);
    match m {
        0xa1b2_c3d4 | 0xa1b2_3c4d => Some(lt),
        0xd4c3_b2a1 | 0x4d3c_b2a1 => Some(lt.swap_bytes()),
        _ => None,
    }
}

#[test]
fn every_corpus_file_reads_like_tcpdump() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (
        tmp.path().join("weir.pcap"),
        tmp.path().join("tcpdump.pcap"),
    );
    let (mut same, mut both_failed) = (0, 0);
    let mut mismatches = Vec::new();
    for f in corpus() {
        let w = run(weir()
            .args(["read", "--micro", "-r"])
            .arg(&f)
            .arg("-w")
            .arg(&a));
        let t = run(Command::new("tcpdump").arg("-r").arg(&f).arg("-w").arg(&b));
        let (wa, tb) = (
            std::fs::read(&a).unwrap_or_default(),
            std::fs::read(&b).unwrap_or_default(),
        );
        if w.status.success() != t.status.success() {
            mismatches.push(format!(
                "{}: weir {:?} ({}), tcpdump {:?} ({})",
                f.display(),
                w.status.code(),
                String::from_utf8_lossy(&w.stderr).trim(),
                t.status.code(),
                String::from_utf8_lossy(&t.stderr).trim()
            ));
            continue;
        }
        if !t.status.success() && tb.is_empty() {
            // tcpdump could not even open it (bad header): weir must fail too, checked above.
            both_failed += 1;
            continue;
        }
        if wa != tb {
            mismatches.push(format!(
                "{}: outputs differ ({} vs {} bytes)",
                f.display(),
                wa.len(),
                tb.len()
            ));
        } else {
            same += 1;
        }
    }
    eprintln!("read equivalence: {same} byte-identical, {both_failed} refused by both");
    assert!(
        mismatches.is_empty(),
        "{} mismatches:\n{}",
        mismatches.len(),
        mismatches.join("\n")
    );
    assert!(same > 700, "too few files compared: {same}");
}

#[test]
fn every_expression_filters_like_tcpdump() {
    let tmp = tempfile::tempdir().unwrap();
    // Clean files (tcpdump reads them to the end) grouped by link type.
    let mut groups: BTreeMap<u32, Vec<PathBuf>> = BTreeMap::new();
    for f in corpus() {
        let ok = run(Command::new("tcpdump")
            .arg("-r")
            .arg(&f)
            .arg("-w")
            .arg("/dev/null"))
        .status
        .success();
        if let (true, Some(lt)) = (ok, link_type(&f)) {
            groups.entry(lt).or_default().push(f);
        }
    }
    let (a, b) = (
        tmp.path().join("weir.pcap"),
        tmp.path().join("tcpdump.pcap"),
    );
    let (mut compared, mut refused) = (0, 0);
    let mut mismatches = Vec::new();
    for expr in expressions() {
        for (lt, files) in &groups {
            let list = tmp.path().join(format!("list-{lt}"));
            std::fs::write(
                &list,
                files
                    .iter()
                    .map(|f| format!("{}\n", f.display()))
                    .collect::<String>(),
            )
            .unwrap();
            let mut wc = weir();
            wc.args(["read", "--micro", "-w"]).arg(&a);
            for f in files {
                wc.arg("-r").arg(f);
            }
            let w = run(wc.arg("--").arg(&expr));
            let t = run(Command::new("tcpdump")
                .arg("-V")
                .arg(&list)
                .arg("-w")
                .arg(&b)
                .arg("--")
                .arg(&expr));
            if w.status.success() != t.status.success() {
                mismatches.push(format!(
                    "[{expr}] link {lt}: weir {:?} ({}), tcpdump {:?} ({})",
                    w.status.code(),
                    String::from_utf8_lossy(&w.stderr).trim(),
                    t.status.code(),
                    String::from_utf8_lossy(&t.stderr).trim()
                ));
                continue;
            }
            if !t.status.success() {
                refused += 1;
                continue;
            }
            let (wa, tb) = (std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());
            if wa != tb {
                mismatches.push(format!(
                    "[{expr}] link {lt}: outputs differ ({} vs {} bytes)",
                    wa.len(),
                    tb.len()
                ));
            } else {
                compared += 1;
            }
        }
    }
    eprintln!(
        "filter equivalence: {compared} (expression, link type) pairs byte-identical, {refused} refused by both, {} link types",
        groups.len()
    );
    assert!(
        mismatches.is_empty(),
        "{} mismatches:\n{}",
        mismatches.len(),
        mismatches.join("\n")
    );
    assert!(compared >= 30 * 2, "too few comparisons: {compared}");
}
