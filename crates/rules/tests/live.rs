//! Live changes: threads deciding packets while another thread swaps rule sets and adds and
//! removes exact rules. Every packet must be decided under one whole version (its tag and its
//! verdict come from the same set), and the counters must reconcile with what the threads saw.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};

use common::{frame, Pkt};
use weir_decode::{Decoded, LinkType};
use weir_rules::{fields_from_frame, Action, Engine, ExactKey, Outcome, RuleSet, Tag, Verdict};

/// Version `k` of the rules: two rules that match every packet, the first tags it `k` and goes
/// on, the second drops it when `k` is odd and passes it when even. A packet evaluated under a
/// mix of two versions would show a tag whose parity disagrees with its verdict.
fn version(k: u32) -> RuleSet {
    let verdict = if k % 2 == 1 { "drop" } else { "pass" };
    let mut text = format!("any -> tag {k} continue\n");
    // some bulk, so that a swap is not instantaneous to build
    for i in 0..200 {
        text += &format!(
            "exact udp 10.9.{}.{}:1 10.9.0.1:2 -> drop\n",
            i / 250,
            i % 250 + 1
        );
    }
    text += &format!("prio 1 any -> {verdict}\n");
    RuleSet::parse(&text).unwrap()
}

#[test]
fn a_hundred_swaps_under_traffic_keep_every_packet_whole_and_counters_reconcile() {
    let engine = Engine::new(version(0), LinkType::ETHERNET, 262_144).unwrap();
    let pkts: Vec<Vec<u8>> = (0..64u8)
        .map(|i| {
            frame(&Pkt {
                vlan: None,
                v6: i % 5 == 0,
                src: i % 8,
                dst: (i / 8) % 8,
                proto: [6, 17, 1][usize::from(i % 3)],
                sport: 1000 + u16::from(i),
                dport: 80,
                flags: 0x10,
                seq: u32::from(i),
                payload: vec![b'x'; usize::from(i)],
            })
        })
        .collect();
    let done = Arc::new(AtomicBool::new(false));
    let start = Arc::new(Barrier::new(3));
    let workers: Vec<_> = (0..2)
        .map(|_| {
            let (engine, done, start, pkts) =
                (engine.clone(), done.clone(), start.clone(), pkts.clone());
            std::thread::spawn(move || {
                let mut ev = engine.evaluator();
                let mut scratch = Decoded::new();
                let (mut n, mut passed, mut dropped) = (0u64, 0u64, 0u64);
                let mut versions = std::collections::BTreeSet::new();
                start.wait();
                while !done.load(Ordering::Relaxed) {
                    for p in &pkts {
                        let f =
                            fields_from_frame(&mut scratch, LinkType::ETHERNET, p, p.len() as u32);
                        let d = ev.eval(&f, p);
                        let Some(Tag::Num(k)) = d.tag else {
                            panic!("untagged packet: {d:?}");
                        };
                        let want = if k % 2 == 1 {
                            Outcome::Dropped
                        } else {
                            Outcome::Passed
                        };
                        assert_eq!(d.outcome, want, "tag {k} under version {}", d.version);
                        match d.outcome {
                            Outcome::Passed => passed += 1,
                            _ => dropped += 1,
                        }
                        versions.insert(d.version);
                        n += 1;
                    }
                }
                (n, passed, dropped, versions.len())
            })
        })
        .collect();
    start.wait();
    let mut key_n = 0u32;
    for k in 1..=100u32 {
        engine.replace(version(k)).unwrap();
        // exact rules added and removed between the swaps (on conversations the traffic never
        // uses, so the expected verdicts stay those of the wildcard rules)
        let keys: Vec<(ExactKey, Action)> = (0..10)
            .map(|_| {
                key_n += 1;
                let k = ExactKey::new(
                    4,
                    0xffff,
                    17,
                    0x0b00_0000 + u128::from(key_n),
                    9,
                    0x0b00_0001,
                    9,
                );
                let a = Action {
                    verdict: Some(Verdict::Drop),
                    ..Action::default()
                };
                (k, a)
            })
            .collect();
        engine.add_exact(&keys).unwrap();
        let gone = engine.del_exact(&keys[..5].iter().map(|k| k.0).collect::<Vec<_>>());
        assert_eq!(gone, 5);
        std::thread::yield_now();
    }
    std::thread::sleep(std::time::Duration::from_millis(50));
    done.store(true, Ordering::Relaxed);
    let (mut n, mut passed, mut dropped, mut seen) = (0, 0, 0, 0);
    for w in workers {
        let (a, b, c, v) = w.join().unwrap();
        n += a;
        passed += b;
        dropped += c;
        seen = seen.max(v);
    }
    let t = engine.totals();
    assert_eq!(t.packets_in, n);
    assert_eq!((t.passed, t.dropped), (passed, dropped));
    assert!(t.reconciles(), "{t:?}");
    // the last version's rules counted exactly the packets it decided
    let s = engine.stats();
    assert_eq!(s.wild.len(), 2);
    assert_eq!(s.wild[0].stats.packets, s.wild[1].stats.packets);
    assert!(s.wild.iter().all(|w| w.stats.reconciles()));
    assert_eq!(s.exact_rules, 200 + 5);
    eprintln!("{n} packets under {seen} versions seen by one thread; {t:?}");
    assert!(seen > 1, "the threads never saw a swap");
}

#[test]
fn exact_rules_added_and_removed_at_run_time_take_effect_at_the_next_packet() {
    let engine = Engine::new(
        RuleSet::parse("any -> pass").unwrap(),
        LinkType::ETHERNET,
        0,
    )
    .unwrap();
    let mut ev = engine.evaluator();
    let p = frame(&Pkt {
        vlan: None,
        v6: false,
        src: 1,
        dst: 2,
        proto: 6,
        sport: 5000,
        dport: 80,
        flags: 0x10,
        seq: 1,
        payload: vec![],
    });
    let mut scratch = Decoded::new();
    let f = fields_from_frame(&mut scratch, LinkType::ETHERNET, &p, p.len() as u32);
    assert_eq!(ev.eval(&f, &p).outcome, Outcome::Passed);
    // the rule is given in the other direction: it still matches
    let k = ExactKey::new(4, 0xffff, 6, f.dst, 80, f.src, 5000);
    let drop = Action {
        verdict: Some(Verdict::Drop),
        ..Action::default()
    };
    engine.add_exact(&[(k, drop.clone())]).unwrap();
    assert!(
        engine.add_exact(&[(k, drop)]).is_err(),
        "a duplicate must be refused"
    );
    assert_eq!(ev.eval(&f, &p).outcome, Outcome::Dropped);
    assert_eq!(engine.exact_rules()[0].stats.dropped, 1);
    assert_eq!(engine.del_exact(&[k]), 1);
    assert_eq!(ev.eval(&f, &p).outcome, Outcome::Passed);
    assert!(engine.totals().reconciles());
}

#[test]
fn engines_are_shared_and_evaluators_move_between_threads() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    send_sync::<Engine>();
    send::<weir_rules::Evaluator>();
}

#[test]
fn the_flow_table_is_bounded_and_counts_evictions() {
    let set = RuleSet::parse("set flows 16\nany -> cutoff-packets 1").unwrap();
    let engine = Engine::new(set, LinkType::ETHERNET, 0).unwrap();
    let mut ev = engine.evaluator();
    for i in 0..1000u16 {
        let p = frame(&Pkt {
            vlan: None,
            v6: false,
            src: 1,
            dst: 2,
            proto: 17,
            sport: 1000 + i,
            dport: 53,
            flags: 0,
            seq: 0,
            payload: vec![1, 2, 3],
        });
        let mut scratch = Decoded::new();
        let f = fields_from_frame(&mut scratch, LinkType::ETHERNET, &p, p.len() as u32);
        // each flow's first packet is within its budget
        assert_eq!(ev.eval(&f, &p).outcome, Outcome::Passed);
        assert!(ev.flows() <= 16);
    }
    let t = engine.totals();
    assert_eq!(t.flow_evictions, 1000 - ev.flows() as u64);
    assert!(t.reconciles());
}
