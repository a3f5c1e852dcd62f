//! A report counts only what the kernel took: frames queued in the TX ring that a failed
//! `send()` left there are queued, not sent, in packets and in bytes.
//!
//! The bench is one veth pair this test creates (and removes): the ring is opened while the
//! interface is up, then the interface is set down, so the kernel refuses every `send()` with
//! ENETDOWN and leaves the frames in the ring. Nothing leaves the machine, or even the pair.
//! The same for the AF_XDP socket (`--backend xdp`): `sendto()` kicks fail with ENETDOWN and the
//! frames stay in its TX ring.

use std::process::Command;
use std::sync::atomic::AtomicBool;

use weir_capture::xdp::tx::XskTx;
use weir_gen::drive::{self, SendOptions};
use weir_gen::{FlowSpec, Proto, Rate, SizeMix, Synth, SynthConfig, Transmit, TxConfig, TxRing};

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// A veth pair, removed when dropped.
struct Pair(String);

impl Drop for Pair {
    fn drop(&mut self) {
        let _ = ip(&["link", "del", &self.0]);
    }
}

#[test]
fn frames_left_in_the_ring_are_queued_not_sent() {
    left_in_the_ring("p", |name| {
        TxRing::open(
            name,
            TxConfig {
                frame_count: 64,
                ..TxConfig::default()
            },
        )
        .unwrap()
    });
}

#[test]
fn frames_left_in_the_xdp_tx_ring_are_queued_not_sent() {
    left_in_the_ring("x", |name| XskTx::open(name, 64).unwrap());
}

/// Opens a sender with `open` on a pair that is up, sets it down, sends ten frames.
fn left_in_the_ring<T: Transmit>(tag: &str, open: impl FnOnce(&str) -> T) {
    let name = format!("wgu{tag}{}", std::process::id() % 100_000);
    let peer = format!("{name}p");
    if let Err(e) = ip(&["link", "add", &name, "type", "veth", "peer", "name", &peer]) {
        weir_testkit::missing(&format!("cannot make a veth pair (needs root and ip): {e}"));
        return;
    }
    let pair = Pair(name.clone());
    ip(&["link", "set", &peer, "up"]).unwrap();
    ip(&["link", "set", &name, "up"]).unwrap();
    let mut ring = open(&name);
    ip(&["link", "set", &name, "down"]).unwrap();

    let flow = FlowSpec {
        src_mac: [2, 0, 0, 0, 0, 1],
        dst_mac: [2, 0, 0, 0, 0, 2],
        vlan: None,
        src_ip: "10.0.0.1".parse().unwrap(),
        dst_ip: "10.0.0.2".parse().unwrap(),
        src_port: 40_000,
        dst_port: 9000,
        tos: 0,
        ttl: 64,
        proto: Proto::Udp,
    };
    let mut src = Synth::new(SynthConfig {
        flows: vec![flow],
        stream_base: 0,
        sizes: SizeMix::Fixed(100),
        seed: 1,
        rate: Rate::Top,
        count: Some(10),
        duration_ns: None,
    })
    .unwrap();
    let stop = AtomicBool::new(false);
    let rep = drive::to_ring(&mut src, &mut ring, SendOptions::default(), &stop).unwrap();
    drop(ring);
    drop(pair);

    // Ten 100-byte frames were written into the ring; the kernel took none of them.
    assert_eq!((rep.queued, rep.queued_bytes), (10, 1000));
    assert_eq!((rep.sent, rep.bytes), (0, 0), "{rep:?}");
    assert_eq!(rep.unsent, 10);
    assert_eq!(rep.rejected, 0);
    assert!(rep.send_errors >= 1, "{rep:?}");
    let err = rep.last_error.clone().unwrap();
    assert!(err.contains("Network is down"), "{err}");
    let line = rep.summary(false);
    assert!(line.starts_with("sent 0 packets (0 bytes)"), "{line}");
    assert!(
        line.ends_with("; 10 packets (1000 bytes) queued, 10 never sent"),
        "{line}"
    );
    assert!(rep.failure().unwrap().contains("10 packets not sent"));
    let j = rep.to_json();
    assert_eq!(
        (j["sent"].as_u64(), j["bytes"].as_u64()),
        (Some(0), Some(0))
    );
    assert_eq!(j["queued_bytes"].as_u64(), Some(1000));
}
