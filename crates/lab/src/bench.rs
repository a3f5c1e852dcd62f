//! [`Bench`]: the namespaces, veth pairs, addresses, routes and neighbour entries of a lab, its
//! state file, and its removal.

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use serde::{Deserialize, Serialize};

use crate::LabError;

/// Prefix of every namespace the lab creates.
pub const PREFIX: &str = "weirlab-";

/// Where state files live.
pub const STATE_DIR: &str = "/run/weir-lab";

/// The sender's address.
pub const SENDER_IP: &str = "10.10.1.1";
/// The router's address on the sender's side.
pub const ROUTER_IN_IP: &str = "10.10.1.2";
/// The router's address on the receiver's side.
pub const ROUTER_OUT_IP: &str = "10.10.2.1";
/// The receiver's address.
pub const RECEIVER_IP: &str = "10.10.2.2";
/// The bottleneck interface (in the router's namespace).
pub const BOTTLENECK: &str = "out0";

/// The three roles.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Sends the traffic.
    Sender,
    /// Forwards it; its `out0` is the bottleneck.
    Router,
    /// Receives it.
    Receiver,
}

impl Role {
    fn suffix(self) -> &'static str {
        match self {
            Role::Sender => "snd",
            Role::Router => "rtr",
            Role::Receiver => "rcv",
        }
    }
}

/// What `lab up` recorded, so `lab down` finds it again.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct State {
    /// Namespaces created.
    pub namespaces: Vec<String>,
    /// MAC addresses: sender eth0, router in0, router out0, receiver eth0.
    pub macs: Vec<String>,
}

/// Runs a command, returning its output or an error carrying its stderr.
pub fn sh(args: &[&str]) -> Result<Output, LabError> {
    tracing::debug!("lab: {}", args.join(" "));
    let out = Command::new(args[0])
        .args(&args[1..])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| LabError::Command {
            cmd: args.join(" "),
            stderr: format!("cannot run {}: {e}", args[0]),
        })?;
    if !out.status.success() {
        return Err(LabError::Command {
            cmd: args.join(" "),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(out)
}

/// A lab bench, by name.
#[derive(Clone, Debug)]
pub struct Bench {
    name: String,
}

impl Bench {
    /// The bench called `name` (letters and digits, at most 12).
    pub fn new(name: &str) -> Result<Bench, LabError> {
        if name.is_empty() || name.len() > 12 || !name.chars().all(|c| c.is_ascii_alphanumeric()) {
            return Err(LabError::Config(format!(
                "bench name '{name}': 1 to 12 letters or digits"
            )));
        }
        Ok(Bench { name: name.into() })
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The namespace of a role.
    pub fn ns(&self, role: Role) -> String {
        format!("{PREFIX}{}-{}", self.name, role.suffix())
    }

    fn state_path(&self) -> PathBuf {
        PathBuf::from(STATE_DIR).join(format!("{}.json", self.name))
    }

    /// Runs a command inside a role's namespace.
    pub fn exec(&self, role: Role, args: &[&str]) -> Result<Output, LabError> {
        let ns = self.ns(role);
        let mut v = vec!["ip", "netns", "exec", ns.as_str()];
        v.extend_from_slice(args);
        sh(&v)
    }

    /// A `Command` that runs inside a role's namespace (for long-running processes).
    pub fn command(&self, role: Role, program: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.ns(role), program]);
        c
    }

    /// True when the bench's namespaces exist.
    pub fn exists(&self) -> bool {
        namespaces()
            .map(|l| l.contains(&self.ns(Role::Router)))
            .unwrap_or(false)
    }

    /// An error naming the command that builds the bench, unless it is up.
    pub fn require_up(&self) -> Result<(), LabError> {
        if !self.exists() {
            return Err(LabError::Config(format!(
                "no bench '{}': run `weir lab up --name {}` first",
                self.name(),
                self.name()
            )));
        }
        Ok(())
    }

    /// What `lab up` built, in two lines: the chain of namespaces with their addresses, and the
    /// bottleneck with the MAC addresses of `st`.
    pub fn describe(&self, st: &State) -> String {
        format!(
            "bench '{}' up: {} (eth0 {SENDER_IP}) — {} (in0 {ROUTER_IN_IP}, out0 {ROUTER_OUT_IP}) — {} (eth0 {RECEIVER_IP})\n\
             bottleneck: {} out0; MACs {}\n",
            self.name(),
            self.ns(Role::Sender),
            self.ns(Role::Router),
            self.ns(Role::Receiver),
            self.ns(Role::Router),
            st.macs.join(" ")
        )
    }

    /// Whether the bench is up, its namespaces and the bottleneck's qdisc (as `tc` shows it),
    /// then every bench present on the machine.
    pub fn status(&self) -> Result<String, LabError> {
        let mut text = if self.exists() {
            let st = self.state().unwrap_or_default();
            let q = self.exec(Role::Router, &["tc", "qdisc", "show", "dev", BOTTLENECK])?;
            format!(
                "bench '{}' is up: {}\nbottleneck qdisc: {}",
                self.name(),
                st.namespaces.join(", "),
                String::from_utf8_lossy(&q.stdout)
            )
        } else {
            format!("bench '{}' is down\n", self.name())
        };
        let others = benches()?;
        if !others.is_empty() {
            text.push_str(&format!("benches present: {}\n", others.join(", ")));
        }
        Ok(text)
    }

    /// Reads the state file.
    pub fn state(&self) -> Result<State, LabError> {
        let p = self.state_path();
        let text = std::fs::read_to_string(&p).map_err(|e| LabError::Io {
            path: p.display().to_string(),
            source: e,
        })?;
        serde_json::from_str(&text).map_err(|e| LabError::Config(format!("{}: {e}", p.display())))
    }

    fn mac(&self, role: Role, iface: &str) -> Result<String, LabError> {
        let out = self.exec(role, &["cat", &format!("/sys/class/net/{iface}/address")])?;
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    }

    /// Builds the bench (removing a previous one of the same name first).
    pub fn up(&self) -> Result<State, LabError> {
        if self.exists() {
            self.down()?;
        }
        std::fs::create_dir_all(STATE_DIR).map_err(|e| LabError::Io {
            path: STATE_DIR.into(),
            source: e,
        })?;
        let (s, r, c) = (
            self.ns(Role::Sender),
            self.ns(Role::Router),
            self.ns(Role::Receiver),
        );
        // Record first: whatever happens next, `down` knows what to look for.
        let mut state = State {
            namespaces: vec![s.clone(), r.clone(), c.clone()],
            macs: vec![],
        };
        self.save(&state)?;
        let built = (|| -> Result<(), LabError> {
            for ns in [&s, &r, &c] {
                sh(&["ip", "netns", "add", ns])?;
            }
            // Interfaces are created inside the namespaces: nothing appears in ours.
            sh(&[
                "ip", "link", "add", "eth0", "netns", &s, "type", "veth", "peer", "name", "in0",
                "netns", &r,
            ])?;
            sh(&[
                "ip", "link", "add", "out0", "netns", &r, "type", "veth", "peer", "name", "eth0",
                "netns", &c,
            ])?;
            for (role, ifs) in [
                (Role::Sender, &["eth0"][..]),
                (Role::Router, &["in0", "out0"][..]),
                (Role::Receiver, &["eth0"][..]),
            ] {
                // Quiet namespaces: no IPv6 chatter (router solicitations, MLD) in captures.
                self.exec(role, &["sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1"])?;
                self.exec(
                    role,
                    &["sysctl", "-qw", "net.ipv6.conf.default.disable_ipv6=1"],
                )?;
                self.exec(role, &["ip", "link", "set", "lo", "up"])?;
                for i in ifs {
                    self.exec(role, &["ip", "link", "set", i, "up"])?;
                }
            }
            self.exec(
                Role::Sender,
                &[
                    "ip",
                    "addr",
                    "add",
                    &format!("{SENDER_IP}/24"),
                    "dev",
                    "eth0",
                ],
            )?;
            self.exec(
                Role::Router,
                &[
                    "ip",
                    "addr",
                    "add",
                    &format!("{ROUTER_IN_IP}/24"),
                    "dev",
                    "in0",
                ],
            )?;
            self.exec(
                Role::Router,
                &[
                    "ip",
                    "addr",
                    "add",
                    &format!("{ROUTER_OUT_IP}/24"),
                    "dev",
                    "out0",
                ],
            )?;
            self.exec(
                Role::Receiver,
                &[
                    "ip",
                    "addr",
                    "add",
                    &format!("{RECEIVER_IP}/24"),
                    "dev",
                    "eth0",
                ],
            )?;
            self.exec(Role::Router, &["sysctl", "-qw", "net.ipv4.ip_forward=1"])?;
            self.exec(
                Role::Sender,
                &["ip", "route", "add", "default", "via", ROUTER_IN_IP],
            )?;
            self.exec(
                Role::Receiver,
                &["ip", "route", "add", "default", "via", ROUTER_OUT_IP],
            )?;
            let macs = [
                self.mac(Role::Sender, "eth0")?,
                self.mac(Role::Router, "in0")?,
                self.mac(Role::Router, "out0")?,
                self.mac(Role::Receiver, "eth0")?,
            ];
            let neigh = |role, ip: &str, mac: &str, dev: &str| {
                self.exec(
                    role,
                    &[
                        "ip",
                        "neigh",
                        "replace",
                        ip,
                        "lladdr",
                        mac,
                        "dev",
                        dev,
                        "nud",
                        "permanent",
                    ],
                )
            };
            neigh(Role::Sender, ROUTER_IN_IP, &macs[1], "eth0")?;
            neigh(Role::Router, SENDER_IP, &macs[0], "in0")?;
            neigh(Role::Router, RECEIVER_IP, &macs[3], "out0")?;
            neigh(Role::Receiver, ROUTER_OUT_IP, &macs[2], "eth0")?;
            state.macs = macs.to_vec();
            Ok(())
        })();
        if let Err(e) = built {
            let _ = self.down();
            return Err(e);
        }
        self.save(&state)?;
        Ok(state)
    }

    fn save(&self, state: &State) -> Result<(), LabError> {
        let p = self.state_path();
        let text = serde_json::to_string_pretty(state).expect("state serialises");
        std::fs::write(&p, text).map_err(|e| LabError::Io {
            path: p.display().to_string(),
            source: e,
        })
    }

    /// Removes the bench: stops the processes still running in its namespaces (the lab's own
    /// captures, generators and iperf3), deletes the namespaces (and with them the veth pairs)
    /// and the state file. Finds them by the state file and by name, so a crashed run's
    /// leftovers go too. Returns the namespaces removed.
    pub fn down(&self) -> Result<Vec<String>, LabError> {
        let mut wanted: Vec<String> = self.state().map(|s| s.namespaces).unwrap_or_default();
        let mine = format!("{PREFIX}{}-", self.name);
        for ns in namespaces()? {
            if ns.starts_with(&mine) && !wanted.contains(&ns) {
                wanted.push(ns);
            }
        }
        let present = namespaces()?;
        let mut removed = Vec::new();
        for ns in wanted.iter().filter(|n| present.contains(n)) {
            kill_namespace_processes(ns);
            sh(&["ip", "netns", "del", ns])?;
            removed.push(ns.clone());
        }
        let p = self.state_path();
        if p.exists() {
            std::fs::remove_file(&p).map_err(|e| LabError::Io {
                path: p.display().to_string(),
                source: e,
            })?;
        }
        Ok(removed)
    }
}

/// Removes every namespace named `weirlab-*` (benches and probe leftovers) with the processes
/// in them, and every state file. Returns the namespaces removed.
pub fn down_all() -> Result<Vec<String>, LabError> {
    let mut removed = Vec::new();
    for ns in namespaces()?.into_iter().filter(|n| n.starts_with(PREFIX)) {
        kill_namespace_processes(&ns);
        sh(&["ip", "netns", "del", &ns])?;
        removed.push(ns);
    }
    if let Ok(dir) = std::fs::read_dir(STATE_DIR) {
        for e in dir.flatten() {
            if e.file_name().to_str().is_some_and(|n| n.ends_with(".json")) {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
    Ok(removed)
}

/// Names of the lab benches present (from namespaces and state files).
pub fn benches() -> Result<Vec<String>, LabError> {
    let mut v: Vec<String> = namespaces()?
        .iter()
        .filter_map(|n| n.strip_prefix(PREFIX))
        .filter_map(|n| n.rsplit_once('-').map(|(b, _)| b.to_string()))
        .collect();
    if let Ok(dir) = std::fs::read_dir(STATE_DIR) {
        for e in dir.flatten() {
            if let Some(n) = e.file_name().to_str().and_then(|n| n.strip_suffix(".json")) {
                v.push(n.to_string());
            }
        }
    }
    v.sort();
    v.dedup();
    Ok(v)
}

/// The network namespaces that exist (`ip netns list`).
pub fn namespaces() -> Result<Vec<String>, LabError> {
    let out = sh(&["ip", "netns", "list"])?;
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(String::from)
        .collect())
}

/// Sends signal `sig` to process `pid` (one the lab started, or found in a namespace it made);
/// a process already gone is no error.
pub(crate) fn signal(pid: i32, sig: i32) {
    // SAFETY: kill() has no memory-safety preconditions; the callers pass pids of processes
    // the lab started or found in its own namespaces.
    unsafe { libc::kill(pid, sig) };
}

/// Stops (SIGTERM, then SIGKILL) the processes living in a lab namespace, by pid.
fn kill_namespace_processes(ns: &str) {
    let pids = |sig: i32| -> usize {
        let Ok(out) = sh(&["ip", "netns", "pids", ns]) else {
            return 0;
        };
        let list: Vec<i32> = String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect();
        for &pid in &list {
            signal(pid, sig);
        }
        list.len()
    };
    if pids(libc::SIGTERM) == 0 {
        return;
    }
    for _ in 0..50 {
        std::thread::sleep(std::time::Duration::from_millis(20));
        if pids(0) == 0 {
            return;
        }
    }
    pids(libc::SIGKILL);
}
