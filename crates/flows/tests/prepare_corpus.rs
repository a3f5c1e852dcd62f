//! The fast path of `Preparer::prepare` against the decoder path on every packet of every
//! classic pcap of the shared corpus.

use weir_flows::{KeyHasher, Preparer};
use weir_source::FileReader;

const CORPUS: &str = "/work/shared/corpus/pcaps";

#[test]
fn fast_path_equals_decoder_on_the_corpus() {
    let Ok(dir) = std::fs::read_dir(CORPUS) else {
        eprintln!("{CORPUS} missing: skipped");
        return;
    };
    let mut files: Vec<_> = dir.filter_map(|e| e.ok().map(|e| e.path())).collect();
    files.sort();
    let ps = [
        Preparer::new(KeyHasher::with_seed(3), false),
        Preparer::new(KeyHasher::with_seed(3), true),
    ];
    let (mut nfiles, mut packets) = (0, 0u64);
    for path in &files {
        let Ok(mut r) = FileReader::open(path) else {
            continue;
        };
        nfiles += 1;
        let mut k = 0u64;
        while let Ok(Some(p)) = r.next_packet() {
            packets += 1;
            k += 1;
            for prep in &ps {
                let fast = prep.prepare(p.link, p.meta.ts_ns, p.data);
                let slow = prep.prepare_slow(p.link, p.meta.ts_ns, p.data);
                assert_eq!(
                    fast,
                    slow,
                    "{} packet {} (link {:?}): {:02x?}",
                    path.display(),
                    k,
                    p.link,
                    p.data
                );
            }
        }
    }
    eprintln!("{nfiles} files, {packets} packets: fast path = decoder");
    assert!(nfiles >= 700, "{nfiles} files read");
}
