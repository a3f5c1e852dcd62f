//! The fast path of `Preparer::prepare` against the decoder path on every packet of every
//! file of the shared corpus (`$WEIR_CORPUS` or `../shared/corpus/pcaps`; missing: a skip with a
//! note, or a failure when `WEIR_REQUIRE_PEERS` is set).

use weir_flows::{KeyHasher, Preparer};
use weir_pcap::FileReader;

#[test]
fn fast_path_equals_decoder_on_the_corpus() {
    let Some(files) = weir_testkit::corpus() else {
        return;
    };
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
    assert!(
        nfiles * 10 >= files.len() * 9,
        "{nfiles} of {} files read",
        files.len()
    );
    assert!(
        packets >= nfiles as u64,
        "{packets} packets in {nfiles} files"
    );
}
