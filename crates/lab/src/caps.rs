//! What the running kernel offers, found by trying: each qdisc is installed on a veth in a
//! scratch namespace (created and removed here), byte queue limits are looked for in sysfs, TCP
//! small queues in the sysctl tree, and native XDP by attaching a pass-through program.

use serde::Serialize;

use crate::bench::{sh, PREFIX};
use crate::LabError;

/// The qdiscs a study compares, each with the smallest arguments `tc` accepts for it.
pub const QDISCS: [(&str, &str); 12] = [
    ("pfifo_fast", ""),
    ("pfifo", ""),
    ("bfifo", ""),
    ("tbf", "rate 10mbit burst 10kb latency 10ms"),
    ("htb", "default 10"),
    ("prio", ""),
    ("hfsc", "default 10"),
    ("fq_codel", ""),
    ("codel", ""),
    ("fq", ""),
    ("sfq", ""),
    ("netem", ""),
];

/// One finding: available, or why not.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct Finding {
    /// What was tried.
    pub what: String,
    /// `None` when it works, else why it does not.
    pub missing: Option<String>,
}

/// Everything found.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct Capabilities {
    /// One finding per qdisc of [`QDISCS`].
    pub qdiscs: Vec<Finding>,
    /// Byte queue limits on a veth (the bench's bottleneck).
    pub bql: Finding,
    /// TCP small queues (`net.ipv4.tcp_limit_output_bytes`).
    pub tsq: Finding,
    /// Native XDP on a veth.
    pub xdp: Finding,
}

impl Capabilities {
    /// Why qdisc `kind` cannot be used, or `None` when it can (unknown kinds are tried by `tc`
    /// itself when applied).
    pub fn qdisc_missing(&self, kind: &str) -> Option<&str> {
        self.qdiscs
            .iter()
            .find(|f| f.what == kind)
            .and_then(|f| f.missing.as_deref())
    }

    /// A readable summary, one line per finding.
    pub fn describe(&self) -> String {
        let mut s = String::new();
        let ok: Vec<&str> = self
            .qdiscs
            .iter()
            .filter(|f| f.missing.is_none())
            .map(|f| f.what.as_str())
            .collect();
        s.push_str(&format!("qdiscs available: {}\n", ok.join(", ")));
        for f in self.qdiscs.iter().filter(|f| f.missing.is_some()) {
            s.push_str(&format!(
                "qdisc {}: not available ({})\n",
                f.what,
                f.missing.as_deref().unwrap_or_default()
            ));
        }
        for f in [&self.bql, &self.tsq, &self.xdp] {
            match &f.missing {
                None => s.push_str(&format!("{}: available\n", f.what)),
                Some(why) => s.push_str(&format!("{}: not available ({why})\n", f.what)),
            }
        }
        s
    }
}

fn finding(what: &str, r: Result<(), String>) -> Finding {
    Finding {
        what: what.into(),
        missing: r.err(),
    }
}

/// Probes the kernel in a scratch namespace `weirlab-probeNNN-x` (removed before returning, and
/// found by `weir lab down --all` should the process die first).
pub fn probe() -> Result<Capabilities, LabError> {
    let ns = format!("{PREFIX}probe{}-x", std::process::id());
    sh(&["ip", "netns", "add", &ns])?;
    let result = (|| {
        let x = |args: &[&str]| {
            let mut v = vec!["ip", "netns", "exec", ns.as_str()];
            v.extend_from_slice(args);
            sh(&v)
        };
        x(&[
            "ip", "link", "add", "p0", "type", "veth", "peer", "name", "p1",
        ])?;
        x(&["ip", "link", "set", "p0", "up"])?;
        x(&["ip", "link", "set", "p1", "up"])?;
        let mut qdiscs = Vec::new();
        for (kind, args) in QDISCS {
            let mut cmd = vec!["tc", "qdisc", "replace", "dev", "p0", "root", kind];
            cmd.extend(args.split_whitespace());
            let r = x(&cmd).map(|_| ()).map_err(|e| match e {
                LabError::Command { stderr, .. } => format!("tc: {stderr}"),
                other => other.to_string(),
            });
            qdiscs.push(finding(kind, r));
            let _ = x(&["tc", "qdisc", "del", "dev", "p0", "root"]);
        }
        let bql = x(&[
            "test",
            "-d",
            "/sys/class/net/p0/queues/tx-0/byte_queue_limits",
        ])
        .map(|_| ())
        .map_err(|_| {
            "veth has no byte queue limits (no queues/tx-0/byte_queue_limits in sysfs)".to_string()
        });
        let tsq = x(&["test", "-f", "/proc/sys/net/ipv4/tcp_limit_output_bytes"])
            .map(|_| ())
            .map_err(|_| "no net.ipv4.tcp_limit_output_bytes sysctl".to_string());
        let xdp = crate::xdp::probe(&ns, "p0").map_err(|e| e.to_string());
        Ok(Capabilities {
            qdiscs,
            bql: finding("byte queue limits (BQL)", bql),
            tsq: finding("TCP small queues (TSQ)", tsq),
            xdp: finding("native XDP on veth", xdp),
        })
    })();
    let _ = sh(&["ip", "netns", "del", &ns]);
    result
}
