//! `weir rules ...` against a control socket served in this process (weir-control's `Server`
//! over a rule engine): the replies of list/add/del/stats/reload checked against the engine and
//! hand-computed counters, errors that name the column, the socket's mode 0660, a second
//! server refused while the first lives, a stale socket replaced, the socket removed on drop;
//! and rules changed while another thread decides packets: every decision is the one of the
//! version it was made under (each version's rules known from the command that made it).

mod common;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::process::Output;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use common::weir;
use serde_json::Value;
use weir_control::{ControlError, Server};
use weir_decode::{Decoded, LinkType};
use weir_rules::{fields_from_frame, Engine, Outcome, RuleSet};

/// Ethernet + IPv4 + TCP (no payload): `src:sport -> dst:dport`.
fn tcp_frame(src: [u8; 4], sport: u16, dst: [u8; 4], dport: u16) -> Vec<u8> {
    let mut f = vec![0u8; 54];
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    f[14..24].copy_from_slice(&[0x45, 0, 0, 40, 0, 0, 0x40, 0, 64, 6]);
    f[26..30].copy_from_slice(&src);
    f[30..34].copy_from_slice(&dst);
    f[34..36].copy_from_slice(&sport.to_be_bytes());
    f[36..38].copy_from_slice(&dport.to_be_bytes());
    f[46] = 0x50;
    f[47] = 0x10;
    f
}

fn udp_frame(src: [u8; 4], sport: u16, dst: [u8; 4], dport: u16) -> Vec<u8> {
    let mut f = vec![0u8; 42];
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    f[14..24].copy_from_slice(&[0x45, 0, 0, 28, 0, 0, 0x40, 0, 64, 17]);
    f[26..30].copy_from_slice(&src);
    f[30..34].copy_from_slice(&dst);
    f[34..36].copy_from_slice(&sport.to_be_bytes());
    f[36..38].copy_from_slice(&dport.to_be_bytes());
    f[38..40].copy_from_slice(&8u16.to_be_bytes());
    f
}

fn eval(ev: &mut weir_rules::Evaluator, frame: &[u8]) -> weir_rules::Decision {
    let mut scratch = Decoded::new();
    let f = fields_from_frame(&mut scratch, LinkType::ETHERNET, frame, frame.len() as u32);
    ev.eval(&f, frame)
}

fn rules(sock: &Path, args: &[&str]) -> Output {
    let mut c = weir();
    c.arg("rules").args(args).arg("--socket").arg(sock);
    c.output().unwrap()
}

fn ok_stdout(o: &Output) -> String {
    assert!(
        o.status.success(),
        "status {:?}, stderr: {}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout.clone()).unwrap()
}

fn json(o: &Output) -> Value {
    serde_json::from_str(&ok_stdout(o)).unwrap()
}

fn failed(o: &Output) -> String {
    assert_eq!(
        o.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    String::from_utf8(o.stderr.clone()).unwrap()
}

const FILE: &str = "\
id 1 exact tcp 10.0.0.9:5000 10.0.0.1:873 -> drop
id 2 prio -1 src 10.1.0.0/16 -> tag lab continue
id 3 proto udp dport 53 -> pass tag dns
";

#[test]
fn the_rule_commands_over_the_control_socket() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("rules.txt");
    std::fs::write(&file, FILE).unwrap();
    let sock = dir.path().join("control.sock");
    let engine = Engine::new(RuleSet::parse(FILE).unwrap(), LinkType::ETHERNET, 262_144).unwrap();
    let mut ev = engine.evaluator();
    let backup = tcp_frame([10, 0, 0, 1], 873, [10, 0, 0, 9], 5000);
    let dns = udp_frame([10, 1, 2, 3], 4000, [10, 0, 0, 53], 53);
    let telnet = tcp_frame([10, 0, 0, 5], 40000, [10, 0, 0, 6], 23);
    assert_eq!(eval(&mut ev, &backup).outcome, Outcome::Dropped);
    assert_eq!(eval(&mut ev, &dns).outcome, Outcome::Passed);
    assert_eq!(eval(&mut ev, &dns).outcome, Outcome::Passed);

    let server = Server::start(&sock, engine.clone(), Some(file.clone())).unwrap();
    let meta = std::fs::metadata(&sock).unwrap();
    assert!(meta.file_type().is_socket());
    assert_eq!(meta.permissions().mode() & 0o777, 0o660);

    // a second server on the live socket is refused, and the first still answers
    assert!(matches!(
        Server::start(&sock, engine.clone(), None),
        Err(ControlError::InUse(_))
    ));

    // list: the rules in the file syntax, with the counters of the three packets
    let l = json(&rules(&sock, &["list", "--json"]));
    assert_eq!(l["version"], 1);
    assert_eq!(l["exact_total"], 1);
    assert_eq!(l["exact"][0]["id"], 1);
    assert_eq!(
        l["exact"][0]["rule"],
        "exact tcp 10.0.0.1:873 10.0.0.9:5000 -> drop"
    );
    assert_eq!(l["exact"][0]["packets"], 1);
    assert_eq!(l["exact"][0]["dropped"], 1);
    assert_eq!(l["exact"][0]["bytes"], 54);
    let wild: Vec<(u64, &str, u64, u64)> = l["wild"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| {
            (
                w["id"].as_u64().unwrap(),
                w["rule"].as_str().unwrap(),
                w["packets"].as_u64().unwrap(),
                w["passed"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        wild,
        vec![
            (2, "prio -1 src 10.1.0.0/16 -> tag \"lab\" continue", 2, 2),
            (3, "proto udp dport 53 -> pass tag \"dns\"", 2, 2),
        ]
    );
    let table = ok_stdout(&rules(&sock, &["list"]));
    assert!(table.starts_with("version 1, default pass: 2 wildcard rules, 1 exact rules\n"));
    assert!(
        table.contains("exact tcp 10.0.0.1:873 10.0.0.9:5000 -> drop"),
        "{table}"
    );

    // add: a rule without an id gets the highest id plus one, and takes effect
    assert_eq!(eval(&mut ev, &telnet).outcome, Outcome::Passed);
    let out = ok_stdout(&rules(&sock, &["add", "proto tcp dport 23 -> drop"]));
    assert_eq!(out, "added rule 4 (version 2)\n");
    assert_eq!(eval(&mut ev, &telnet).outcome, Outcome::Dropped);
    let out = ok_stdout(&rules(
        &sock,
        &["add", "id 50 exact udp 10.0.0.7:9 10.0.0.8:9 -> pass"],
    ));
    assert_eq!(out, "added rule 50 (version 3)\n");
    // a bad rule: the error names the column; a used id is refused
    let err = failed(&rules(&sock, &["add", "proto tcp dport 8o -> drop"]));
    assert!(
        err.contains("column 17: expected a port or a range A-B, found `8o`"),
        "{err}"
    );
    let err = failed(&rules(&sock, &["add", "id 3 any -> drop"]));
    assert!(err.contains("rule id 3 is already used"), "{err}");
    // the rules that stayed kept their counters
    let l = json(&rules(&sock, &["list", "--json"]));
    assert_eq!(l["version"], 3);
    assert_eq!(l["wild"][1]["id"], 3);
    assert_eq!(l["wild"][1]["packets"], 2);
    assert_eq!(l["wild"][2]["id"], 4);
    assert_eq!(l["wild"][2]["dropped"], 1);

    // del by id and by conversation
    assert_eq!(
        ok_stdout(&rules(&sock, &["del", "4"])),
        "removed rule 4 (version 4)\n"
    );
    assert_eq!(eval(&mut ev, &telnet).outcome, Outcome::Passed);
    assert_eq!(
        ok_stdout(&rules(
            &sock,
            &["del", "--exact", "tcp 10.0.0.9:5000 10.0.0.1:873"]
        )),
        "removed rule 1 (version 5)\n"
    );
    assert_eq!(eval(&mut ev, &backup).outcome, Outcome::Passed);
    let err = failed(&rules(&sock, &["del", "99"]));
    assert!(err.contains("no rule has id 99"), "{err}");
    let err = failed(&rules(
        &sock,
        &["del", "--exact", "tcp 10.0.0.9:5000 10.0.0.x:873"],
    ));
    assert!(
        err.contains("column 19: expected an IP address, found `10.0.0.x`"),
        "{err}"
    );

    // stats: the engine's totals, hand-counted: 7 packets (5 TCP of 54 bytes, 2 UDP of 42), 2 dropped (backup, telnet)
    let s = json(&rules(&sock, &["stats", "--json"]));
    assert_eq!(s["totals"]["packets_in"], 7);
    assert_eq!(s["totals"]["dropped"], 2);
    assert_eq!(s["totals"]["passed"], 5);
    assert_eq!(s["totals"]["reconciles"], true);
    assert_eq!(s["exact"]["rules"], 1);
    let text = ok_stdout(&rules(&sock, &["stats"]));
    assert!(
        text.contains("packets in 7 (354 bytes): passed 5, dropped 2"),
        "{text}"
    );

    // reload: the file read again, swapped in whole
    std::fs::write(
        &file,
        "default drop\nproto udp -> pass\nid 9 port 23 -> pass\n",
    )
    .unwrap();
    assert_eq!(
        ok_stdout(&rules(&sock, &["reload"])),
        "reloaded 2 rules (version 6)\n"
    );
    assert_eq!(eval(&mut ev, &backup).outcome, Outcome::Dropped);
    assert_eq!(eval(&mut ev, &telnet).outcome, Outcome::Passed);
    let l = json(&rules(&sock, &["list", "--json"]));
    assert_eq!(l["default"], "drop");
    assert_eq!(l["exact_total"], 0);
    assert_eq!(l["wild"][1]["rule"], "port 23 -> pass");
    // a broken file is refused and the rules stay
    std::fs::write(&file, "proto tcp -> pass\nsrc 10.0.0.300 -> drop\n").unwrap();
    let err = failed(&rules(&sock, &["reload"]));
    assert!(err.contains("line 2, column 5"), "{err}");
    assert_eq!(json(&rules(&sock, &["list", "--json"]))["version"], 6);

    // raw requests: malformed ones get error replies, the server goes on
    let mut c = UnixStream::connect(&sock).unwrap();
    let mut r = BufReader::new(c.try_clone().unwrap());
    let mut ask = |line: &[u8]| -> Value {
        c.write_all(line).unwrap();
        c.write_all(b"\n").unwrap();
        let mut s = String::new();
        r.read_line(&mut s).unwrap();
        serde_json::from_str(&s).unwrap()
    };
    for bad in [
        &b"garbage"[..],
        b"{\"cmd\":\"rules.add\"}",
        b"{\"cmd\":\"rules.del\",\"id\":-1}",
        b"{\"cmd\":\"x\"}",
    ] {
        let v = ask(bad);
        assert_eq!(v["ok"], false, "{v}");
    }
    assert_eq!(ask(b"{\"cmd\":\"rules.stats\"}")["ok"], true);
    // The server answers an oversize request as soon as it has read MAX_REQUEST + 1 bytes and
    // closes the connection: the rest of our write may meet a closed socket (EPIPE).
    let long = vec![b'x'; weir_control::MAX_REQUEST + 10];
    let _ = c.write_all(&long).and_then(|_| c.write_all(b"\n"));
    let mut s = String::new();
    r.read_line(&mut s).unwrap();
    let v: Value = serde_json::from_str(&s).unwrap();
    assert!(v["error"].as_str().unwrap().contains("longer than"), "{v}");
    drop(r);

    // dropped: the socket is gone and the client says there is no such socket
    drop(server);
    assert!(!sock.exists());
    let err = failed(&rules(&sock, &["list"]));
    assert!(err.contains("no such control socket"), "{err}");

    // a socket left by a dead process is replaced
    drop(UnixListener::bind(&sock).unwrap());
    assert!(sock.exists());
    let server = Server::start(&sock, engine, None).unwrap();
    let err = failed(&rules(&sock, &["reload"]));
    assert!(err.contains("no rule file"), "{err}");
    drop(server);
    // a path that is not a socket is left alone
    std::fs::write(&sock, "x").unwrap();
    let e = Engine::new(RuleSet::default(), LinkType::ETHERNET, 262_144).unwrap();
    assert!(matches!(
        Server::start(&sock, e, None),
        Err(ControlError::NotSocket(_))
    ));
    assert_eq!(std::fs::read(&sock).unwrap(), b"x");
}

#[test]
fn rule_check_reports_kinds_memory_and_errors() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("r.txt");
    std::fs::write(
        &file,
        "exact tcp 10.0.0.9:5000 10.0.0.1:873 -> drop\n\
         exact udp 10.0.0.9:53 10.0.0.1:53 -> pass\n\
         host 10.0.0.9 port 873 -> drop\n\
         proto tcp dport 80 payload \"GET\" -> tag alert pass\n\
         bpf \"tcp port 443\" -> slice 128\n",
    )
    .unwrap();
    let v: Value = serde_json::from_str(&ok_stdout(
        &weir()
            .args(["rules", "check", "--json"])
            .arg(&file)
            .output()
            .unwrap(),
    ))
    .unwrap();
    assert_eq!(v["rules"], 5);
    assert_eq!(v["exact"], 2);
    assert_eq!(v["wild"], 3);
    assert_eq!(v["wild_with_payload"], 1);
    assert_eq!(v["wild_with_bpf"], 1);
    assert_eq!(v["actions"]["drop"], 2);
    assert_eq!(v["actions"]["pass"], 2);
    assert_eq!(v["actions"]["slice"], 1);
    assert_eq!(v["actions"]["tag"], 1);
    assert!(v["exact_table_bytes"].as_u64().unwrap() > 0);
    assert_eq!(v["kernel_exact"], 1);
    assert_eq!(v["kernel_wild"], 1);
    let text = ok_stdout(&weir().args(["rules", "check"]).arg(&file).output().unwrap());
    assert!(text.contains("5 rules: 2 exact, 3 wildcard"), "{text}");
    std::fs::write(&file, "proto tcp -> drop\nproto tcp dport 8o -> drop\n").unwrap();
    let err = failed(&weir().args(["rules", "check"]).arg(&file).output().unwrap());
    assert!(
        err.contains("line 2, column 17: expected a port or a range A-B, found `8o`"),
        "{err}"
    );
}

/// Rules changed over the socket while a thread decides packets: the decision of every packet
/// is the one its version's rules give. Reloads swap two rules at once (telnet dropped and ssh
/// passed, or the reverse) and adds/removes an exact rule for the telnet conversation (sliced).
#[test]
fn every_decision_comes_from_one_whole_version() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("rules.txt");
    let a = "proto tcp dport 23 -> drop\nproto tcp dport 22 -> pass\n";
    let b = "proto tcp dport 23 -> pass\nproto tcp dport 22 -> drop\n";
    std::fs::write(&file, a).unwrap();
    let sock = dir.path().join("c.sock");
    let engine = Engine::new(RuleSet::parse(a).unwrap(), LinkType::ETHERNET, 262_144).unwrap();
    let server = Server::start(&sock, engine.clone(), Some(file.clone())).unwrap();
    let telnet = tcp_frame([10, 0, 0, 5], 40000, [10, 0, 0, 6], 23);
    let ssh = tcp_frame([10, 0, 0, 5], 40001, [10, 0, 0, 6], 22);
    let stop = Arc::new(AtomicBool::new(false));
    let worker = {
        let (engine, stop) = (engine.clone(), Arc::clone(&stop));
        let (telnet, ssh) = (telnet.clone(), ssh.clone());
        std::thread::spawn(move || {
            let mut ev = engine.evaluator();
            let mut seen = Vec::new();
            while !stop.load(Ordering::Relaxed) || seen.len() < 2 {
                let which = seen.len() % 2;
                let d = eval(&mut ev, if which == 0 { &telnet } else { &ssh });
                seen.push((which, d.version, d.outcome));
            }
            seen
        })
    };
    // version -> (file b in force, exact telnet rule present)
    let mut state = std::collections::HashMap::new();
    state.insert(1u64, (false, false));
    let (mut is_b, mut exact) = (false, false);
    for step in 0..30 {
        let v = match step % 3 {
            0 => {
                is_b = !is_b;
                std::fs::write(&file, if is_b { b } else { a }).unwrap();
                json(&rules(&sock, &["reload", "--json"]))["version"]
                    .as_u64()
                    .unwrap()
            }
            1 => {
                exact = true;
                json(&rules(
                    &sock,
                    &[
                        "add",
                        "--json",
                        "exact tcp 10.0.0.6:23 10.0.0.5:40000 -> slice 40",
                    ],
                ))["version"]
                    .as_u64()
                    .unwrap()
            }
            _ => {
                exact = false;
                json(&rules(
                    &sock,
                    &["del", "--json", "--exact", "tcp 10.0.0.5:40000 10.0.0.6:23"],
                ))["version"]
                    .as_u64()
                    .unwrap()
            }
        };
        state.insert(v, (is_b, exact));
    }
    stop.store(true, Ordering::Relaxed);
    let seen = worker.join().unwrap();
    let mut versions = std::collections::BTreeSet::new();
    for &(which, version, outcome) in &seen {
        let (b, exact) = *state
            .get(&version)
            .unwrap_or_else(|| panic!("version {version} made by no command"));
        let want = match (which, b, exact) {
            (0, _, true) => Outcome::Sliced,
            (0, false, _) | (1, true, _) => Outcome::Dropped,
            _ => Outcome::Passed,
        };
        assert_eq!(outcome, want, "packet {which} under version {version}");
        versions.insert(version);
    }
    let t = engine.totals();
    assert_eq!(t.packets_in, seen.len() as u64);
    assert!(t.reconciles());
    assert_eq!(engine.version(), 31);
    eprintln!(
        "{} packets decided under {} of the 31 versions",
        seen.len(),
        versions.len()
    );
    drop(server);
}
