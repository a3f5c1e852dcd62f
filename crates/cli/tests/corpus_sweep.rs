//! Every packet of every corpus file through the reader (mapped and streamed), the decoder and the
//! BPF engine: no panic, no loop, the two reading paths agree, and every failure is a clear error.

mod common;

use std::collections::HashMap;

use weir_filter::Filter;
use weir_pcap::FileReader;

#[test]
fn corpus_through_reader_decoder_and_bpf() {
    let exprs = common::expressions();
    let mut filters: HashMap<(u32, String), Option<Filter>> = HashMap::new();
    let (mut files, mut packets, mut decode_errors, mut damaged, mut matches) =
        (0, 0u64, 0u64, 0, 0u64);
    for path in common::corpus() {
        let Ok(mut mapped) = FileReader::open(&path) else {
            continue;
        };
        let bytes = std::fs::read(&path).unwrap();
        let mut streamed =
            FileReader::from_reader(&path, Box::new(std::io::Cursor::new(bytes))).unwrap();
        files += 1;
        loop {
            let (a, b) = (mapped.next_packet(), streamed.next_packet());
            let (meta, link, data) = match (a, b) {
                (Ok(Some(p)), Ok(Some(q))) => {
                    assert_eq!((p.meta, p.data), (q.meta, q.data), "{}", path.display());
                    (p.meta, p.link, p.data.to_vec())
                }
                (Ok(None), Ok(None)) => break,
                (Err(e), Err(f)) => {
                    assert_eq!(e.to_string(), f.to_string());
                    damaged += 1;
                    break;
                }
                (a, b) => panic!("{}: mapped {a:?} vs streamed {b:?}", path.display()),
            };
            packets += 1;
            let d = weir_decode::decode(link, &data);
            let _ = weir_decode::summary(&d).to_string();
            if d.error().is_some() {
                decode_errors += 1;
            }
            let snaplen = mapped.interfaces()[meta.interface as usize].snaplen;
            let snaplen = weir_filter::effective_snaplen(snaplen);
            for e in &exprs {
                let f = filters
                    .entry((link.0, e.clone()))
                    .or_insert_with(|| Filter::compile(e, link, snaplen).ok());
                if let Some(f) = f {
                    matches += f.matches(&data, meta.orig_len) as u64;
                }
            }
        }
    }
    eprintln!(
        "corpus sweep: {files} files, {packets} packets, {decode_errors} with decode errors, \
         {damaged} damaged files, {matches} filter matches over {} expressions",
        exprs.len()
    );
    assert!(files > 700 && packets > 10_000);
}
