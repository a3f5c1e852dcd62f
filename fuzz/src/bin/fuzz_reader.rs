//! AFL++ harness: arbitrary bytes as a capture file, read in memory and as a trickling stream.
//! Both paths must deliver the same packets and the same damage verdict (a differential check,
//! not just "does not crash"), and every packet goes through the decoder.

use std::io::Read;

struct Trickle(std::io::Cursor<Vec<u8>>);

impl Read for Trickle {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = buf.len().min(13);
        self.0.read(&mut buf[..n])
    }
}

type Seen = (Vec<(u64, u32, u32, u32, Vec<u8>)>, Option<u64>);

fn collect(mut r: weir_pcap::FileReader) -> Seen {
    let mut out = Vec::new();
    loop {
        match r.next_packet() {
            Ok(Some(p)) => {
                let d = weir_decode::decode(p.link, p.data);
                let _ = weir_decode::summary(&d).to_string();
                out.push((p.meta.ts_ns, p.meta.orig_len, p.meta.interface, p.link.0, p.data.to_vec()));
            }
            Ok(None) => return (out, None),
            Err(e) => {
                let at = match e {
                    weir_pcap::ReadError::Damaged { offset, .. } => Some(offset),
                    _ => Some(u64::MAX),
                };
                assert!(matches!(r.next_packet(), Ok(None)), "damage must end the file");
                return (out, at);
            }
        }
    }
}

fn main() {
    afl::fuzz!(|data: &[u8]| {
        let mapped = weir_pcap::FileReader::from_bytes("fuzz", data.to_vec());
        let streamed =
            weir_pcap::FileReader::from_reader("fuzz", Box::new(Trickle(std::io::Cursor::new(data.to_vec()))));
        match (mapped, streamed) {
            (Ok(m), Ok(s)) => assert_eq!(collect(m), collect(s)),
            (Err(_), Err(_)) => {}
            (m, s) => panic!("mapped {:?} vs streamed {:?}", m.is_ok(), s.is_ok()),
        }
    });
}
