//! Test benches made of network namespaces and veth pairs, created by the test and removed when
//! dropped (also when the test panics). Traffic only goes to addresses inside them.

use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

static NEXT: AtomicU32 = AtomicU32::new(0);

fn sh(args: &[&str]) {
    let out = Command::new(args[0]).args(&args[1..]).output().unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A namespace with one veth pair: `host_if` (10.213.N.1/24) stays in the test's namespace,
/// its peer (10.213.N.2/24) lives in `ns`.
pub(crate) struct VethBench {
    /// Namespace name.
    pub ns: String,
    /// The interface on our side, to capture on.
    pub host_if: String,
    /// Our side's address.
    pub host_ip: String,
    /// The namespace side's address.
    pub peer_ip: String,
}

/// A MAC address nobody on a pair has: the host's stack ignores frames sent to it from the
/// namespace, capture on our side sees them (promiscuous), and they go nowhere else.
pub(crate) const NOWHERE: &str = "02:00:00:00:00:99";

impl VethBench {
    /// The namespace side of the pair (`wa…` on our side is `wb…` there).
    pub(crate) fn peer_if(&self) -> String {
        self.host_if.replacen("wa", "wb", 1)
    }

    /// Creates the namespace and the pair.
    pub(crate) fn new() -> VethBench {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let id = format!("{}{}", std::process::id() % 100_000, n);
        let subnet = 100 + (std::process::id() % 100 + n * 7) % 150;
        let b = VethBench {
            ns: format!("weirt{id}"),
            host_if: format!("wa{id}"),
            host_ip: format!("10.213.{subnet}.1"),
            peer_ip: format!("10.213.{subnet}.2"),
        };
        let peer = format!("wb{id}");
        sh(&["ip", "netns", "add", &b.ns]);
        sh(&[
            "ip", "link", "add", &b.host_if, "type", "veth", "peer", "name", &peer,
        ]);
        sh(&["ip", "link", "set", &peer, "netns", &b.ns]);
        sh(&[
            "ip",
            "addr",
            "add",
            &format!("{}/24", b.host_ip),
            "dev",
            &b.host_if,
        ]);
        sh(&["ip", "link", "set", &b.host_if, "up"]);
        let nsx = |a: &[&str]| {
            let mut v = vec!["ip", "netns", "exec", &b.ns];
            v.extend_from_slice(a);
            sh(&v);
        };
        nsx(&[
            "ip",
            "addr",
            "add",
            &format!("{}/24", b.peer_ip),
            "dev",
            &peer,
        ]);
        nsx(&["ip", "link", "set", &peer, "up"]);
        nsx(&["ip", "link", "set", "lo", "up"]);
        // Static neighbours: no ARP exchange interleaved with (or queueing) the measured traffic.
        let host_mac =
            std::fs::read_to_string(format!("/sys/class/net/{}/address", b.host_if)).unwrap();
        let out = Command::new("ip")
            .args([
                "netns",
                "exec",
                &b.ns,
                "cat",
                &format!("/sys/class/net/{peer}/address"),
            ])
            .output()
            .unwrap();
        let peer_mac = String::from_utf8(out.stdout).unwrap();
        nsx(&[
            "ip",
            "neigh",
            "replace",
            &b.host_ip,
            "lladdr",
            host_mac.trim(),
            "dev",
            &peer,
            "nud",
            "permanent",
        ]);
        sh(&[
            "ip",
            "neigh",
            "replace",
            &b.peer_ip,
            "lladdr",
            peer_mac.trim(),
            "dev",
            &b.host_if,
            "nud",
            "permanent",
        ]);
        b
    }

    /// Sends `count` UDP datagrams from the namespace to our side's `port`; each payload is
    /// `WEIR` + a 4-byte big-endian sequence number + `pad` filler bytes.
    pub(crate) fn send_udp(&self, port: u16, count: u32, pad: usize) {
        self.send_udp_flows(port, 1, count, pad);
    }
}

impl VethBench {
    /// Sends `count` UDP datagrams to our side's `port` from `flows` sockets (source ports
    /// differ) in turn; payload `WEIR` + 4-byte big-endian sequence number (over all flows) +
    /// `pad` filler bytes.
    pub(crate) fn send_udp_flows(&self, port: u16, flows: u32, count: u32, pad: usize) {
        let script = format!(
            "import socket,struct\n\
             ss=[socket.socket(socket.AF_INET,socket.SOCK_DGRAM) for _ in range({flows})]\n\
             for i in range({count}):\n    ss[i%{flows}].sendto(b'WEIR'+struct.pack('>I',i)+b'x'*{pad},('{}',{port}))\n",
            self.host_ip
        );
        let out = Command::new("ip")
            .args(["netns", "exec", &self.ns, "python3", "-c", &script])
            .stdout(Stdio::null())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

impl Drop for VethBench {
    fn drop(&mut self) {
        // Deleting the namespace deletes the peer and with it our side of the pair.
        let _ = Command::new("ip").args(["netns", "del", &self.ns]).output();
        let _ = Command::new("ip")
            .args(["link", "del", &self.host_if])
            .output();
    }
}
