//! AFL++ harness for the index. The first byte picks a mode:
//! 0: differential — the hand-written key fast path and the full decoder must find the same keys
//!    and the same "decoded without error" answer for any Ethernet frame;
//! 1: the index file parser on arbitrary bytes (given a valid CRC so the fuzzer gets past it),
//!    then candidate queries on whatever parses: no panic, candidates inside the chunk table;
//! 2: the expression-to-query parser on arbitrary text: no panic.

use weir_index::{Index, Query};
use weir_packet::LinkType;

fn main() {
    afl::fuzz!(|data: &[u8]| {
        let Some((&mode, rest)) = data.split_first() else {
            return;
        };
        match mode % 3 {
            0 => {
                let (mut fast, mut slow) = (Vec::new(), Vec::new());
                let a = weir_index::keys_of(LinkType::ETHERNET, rest, &mut fast);
                let b = weir_index::keys_of_decoded(LinkType::ETHERNET, rest, &mut slow);
                fast.sort_unstable();
                fast.dedup();
                slow.sort_unstable();
                slow.dedup();
                assert_eq!((a, fast), (b, slow));
            }
            1 => {
                let mut v = rest.to_vec();
                let crc = crc32fast::hash(&v);
                v.extend_from_slice(&crc.to_le_bytes());
                if let Ok(ix) = Index::parse(&v) {
                    for expr in ["host 10.0.0.1", "port 80 or net 10.0.0.0/8", "tcp and port 53", ""] {
                        let c = ix.candidates(&Query::from_expr(expr), 0, u64::MAX);
                        assert!(c.len() <= ix.chunks());
                    }
                }
            }
            _ => {
                let _ = Query::from_expr(&String::from_utf8_lossy(rest));
            }
        }
    });
}
