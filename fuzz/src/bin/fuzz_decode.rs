//! AFL++ harness: the first two bytes pick a link type, the rest is a frame. The decoder and its
//! summary must not panic, and decoding a prefix of the frame must find a prefix of the layers
//! (truncation can only remove layers at the end, never invent new ones).

const LINKS: [u32; 13] = [0, 1, 9, 12, 14, 50, 51, 101, 108, 113, 228, 229, 276];

fn main() {
    afl::fuzz!(|data: &[u8]| {
        if data.len() < 2 {
            return;
        }
        let link = weir_packet::LinkType(LINKS[data[0] as usize % LINKS.len()]);
        let frame = &data[2..];
        let full = weir_decode::decode(link, frame);
        let _ = weir_decode::summary(&full).to_string();
        let _ = weir_decode::protocol_name(&full);
        let _ = (full.ip(), full.transport(), full.vlan());
        let cut = data[1] as usize % (frame.len() + 1);
        let part = weir_decode::decode(link, &frame[..cut]);
        assert!(part.layers().len() <= full.layers().len());
    });
}
