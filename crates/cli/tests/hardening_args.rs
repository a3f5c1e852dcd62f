//! The command line as a hostile user and a tcpdump user meet it (issue 14, items 1, 4, 9, 17,
//! 18, 19): every number is finite and in range or a usage error (exit 2) naming the limit,
//! never a panic or a silent clamp; `-s 0` is the whole packet; an interface given twice is
//! refused; options may follow the expression, as in tcpdump; the argument groups are shared
//! (one EXPR help) and options a mode ignores are refused.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::netns::VethBench;
use common::{corpus, run, start, tshark_fields, wait, weir, weir_bounded};

/// A corpus file with both UDP (2 packets) and TCP (10 packets).
fn mixed() -> PathBuf {
    corpus()
        .into_iter()
        .find(|p| p.ends_with("dns__dns-frames__input.pcap"))
        .expect("corpus file dns__dns-frames__input.pcap")
}

/// Asserts a usage error: exit 2, no panic, and stderr naming every one of `words`.
fn assert_usage(args: &[&str], words: &[&str]) {
    let out = weir_bounded(args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "weir {args:?}: {err}");
    assert!(!err.contains("panicked"), "weir {args:?}: {err}");
    for w in words {
        assert!(err.contains(w), "weir {args:?} should name {w:?}: {err}");
    }
}

fn stdout_of(cmd: &mut Command) -> String {
    let out = run(cmd);
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Item 1 (and 19): every duration, rate, size and count of every subcommand, as a hostile
/// user types them. Old main panicked ("cannot convert float seconds to Duration"), wrote an
/// unbounded file, wrote nothing with exit 0, or clamped silently.
#[test]
fn numeric_options_are_finite_and_in_range() {
    let f = mixed();
    let f = f.to_str().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let store = store.to_str().unwrap();
    let secs = "from 0.000000001 to 1000000000";
    for bad in ["-1", "nan", "inf", "1e30", "0"] {
        for live in [
            vec!["capture", "-i", "lo", "-w", "/dev/null"],
            vec!["record", "-i", "lo", "-o", store],
            vec!["flows", "-i", "lo"],
        ] {
            let mut a = live.clone();
            a.extend(["--duration", bad]);
            assert_usage(&a, &["--duration", secs]);
        }
        assert_usage(
            &["gen", "-w", "/dev/null", "--pps", "1000", "--duration", bad],
            &["--duration", secs],
        );
        for t in ["--idle-timeout", "--active-timeout", "--fin-grace"] {
            assert_usage(&["flows", "-r", f, t, bad], &[t, secs]);
        }
        for t in ["--flow-idle-timeout", "--flow-active-timeout"] {
            assert_usage(
                &["record", "-i", "lo", "-o", store, "--flows", t, bad],
                &[t, secs],
            );
        }
        assert_usage(
            &["record", "-i", "lo", "-o", store, "--max-age", bad],
            &["--max-age", secs],
        );
        assert_usage(&["latency", f, f, "--window", bad], &["--window", secs]);
        // the analyzers' durations, alone and beside `record`: one parser, one message
        // (record's own parser said "seconds from 1e-9 to 1e9")
        for (alone, beside) in [
            (["http", "-r", f, "--idle-timeout"], "--http-idle-timeout"),
            (["voip", "-r", f, "--call-linger"], "--voip-call-linger"),
            (["voip", "-r", f, "--call-timeout"], "--voip-call-timeout"),
        ] {
            let mut a = alone.to_vec();
            a.push(bad);
            assert_usage(&a, &[alone[3], secs]);
            let with = if beside.starts_with("--http") {
                "--http"
            } else {
                "--voip"
            };
            let r = [
                "record",
                "-i",
                "lo",
                "-o",
                store,
                with,
                "/dev/null",
                beside,
                bad,
            ];
            assert_usage(&r, &[beside, secs]);
        }
        assert_usage(
            &["voip", "-r", f, "--plot", store, "--plot-interval", bad],
            &["--plot-interval", secs],
        );
        let plot = ["--voip", "/dev/null", "--voip-plot", store];
        let mut r = vec!["record", "-i", "lo", "-o", store];
        r.extend(plot);
        r.extend(["--voip-plot-interval", bad]);
        assert_usage(&r, &["--voip-plot-interval", secs]);
        assert_usage(
            &["gen", "-w", "/dev/null", "--pps", bad],
            &["--pps", "from 0.001 to 1000000000"],
        );
        assert_usage(
            &["gen", "-w", "/dev/null", "--mbps", bad],
            &["--mbps", "from 0.001 to 10000000"],
        );
        assert_usage(
            &["gen", "-w", "/dev/null", "--replay", f, "--multiplier", bad],
            &["--multiplier", "from 0.000001 to 1000000"],
        );
    }
    // Integers: negative, zero, huge.
    let cases: &[(&[&str], &[&str])] = &[
        (
            &["capture", "-i", "lo", "-c", "0"],
            &["invalid packet count 0"],
        ),
        (
            &["capture", "-i", "lo", "-c", "-1"],
            &["invalid packet count -1"],
        ),
        (&["read", "-r", f, "-c", "0"], &["invalid packet count 0"]),
        (&["decode", "-r", f, "-c", "0"], &["invalid packet count 0"]),
        (
            &["gen", "-w", "/dev/null", "-c", "0"],
            &["invalid packet count 0"],
        ),
        (
            &["capture", "-i", "lo", "-s", "-1"],
            &["invalid snaplen -1", "262144"],
        ),
        (
            &["capture", "-i", "lo", "-s", "262145"],
            &["invalid snaplen", "262144"],
        ),
        (
            &["capture", "-i", "lo", "--threads", "0"],
            &["--threads", "1..=256"],
        ),
        (
            &["capture", "-i", "lo", "--threads", "1000"],
            &["--threads", "1..=256"],
        ),
        (
            &["capture", "-i", "lo", "--buffer-mib", "0"],
            &["--buffer-mib", "power of two"],
        ),
        (
            &["capture", "-i", "lo", "--buffer-mib", "3"],
            &["--buffer-mib", "power of two"],
        ),
        (
            &[
                "record",
                "-i",
                "lo",
                "-o",
                store,
                "--buffer-mib",
                "1099511627776",
            ],
            &["--buffer-mib", "65536"],
        ),
        (
            &["capture", "-i", "lo", "--block-size", "100"],
            &["--block-size", "4096"],
        ),
        (
            &["capture", "-i", "lo", "--block-size", "-4096"],
            &["--block-size", "4096"],
        ),
        (
            &["capture", "-i", "lo", "--block-count", "0"],
            &["--block-count", "1..=1048576"],
        ),
        (
            &[
                "capture",
                "-i",
                "lo",
                "--block-size",
                "1073741824",
                "--block-count",
                "1024",
            ],
            &["16 GiB"],
        ),
        (
            &["record", "-i", "lo", "-o", store, "--segment-mib", "0"],
            &["--segment-mib", "1..=1048576"],
        ),
        (
            &[
                "record",
                "-i",
                "lo",
                "-o",
                store,
                "--segment-mib",
                "18446744073709551615",
            ],
            &["--segment-mib", "1..=1048576"],
        ),
        (
            &["record", "-i", "lo", "-o", store, "--write-mib", "0"],
            &["--write-mib", "1..=1024"],
        ),
        (
            &[
                "record",
                "-i",
                "lo",
                "-o",
                store,
                "--segment-mib",
                "2",
                "--write-mib",
                "4",
            ],
            &["--write-mib 4", "--segment-mib 2"],
        ),
        (
            &["record", "-i", "lo", "-o", store, "--max-mib", "0"],
            &["--max-mib"],
        ),
        (
            &[
                "record",
                "-i",
                "lo",
                "-o",
                store,
                "--segment-mib",
                "64",
                "--max-mib",
                "10",
            ],
            &["--max-mib 10", "--segment-mib 64"],
        ),
        (
            &["record", "-i", "lo", "-o", store, "--index-chunk-kib", "1"],
            &["--index-chunk-kib", "4..=1048576"],
        ),
        (
            &["index", f, "--chunk-kib", "0"],
            &["--chunk-kib", "4..=1048576"],
        ),
        (
            &["flows", "-r", f, "--workers", "0"],
            &["--workers", "1..=256"],
        ),
        (
            &["flows", "-r", f, "--workers", "1000"],
            &["--workers", "1..=256"],
        ),
        (&["flows", "-r", f, "--max-flows", "0"], &["--max-flows"]),
        (
            &[
                "flows",
                "-r",
                f,
                "--workers",
                "1",
                "--max-flows",
                "18446744073709551615",
            ],
            &["--max-flows", "16777214 per worker"],
        ),
        (
            &["gen", "-w", "/dev/null", "--loops", "0", "--replay", f],
            &["--loops"],
        ),
        (&["gen", "-w", "/dev/null", "--flows", "0"], &["--flows"]),
        (
            &["gen", "-w", "/dev/null", "--hosts", "0"],
            &["--hosts", "1..=65535"],
        ),
        (
            &["gen", "-w", "/dev/null", "--hosts", "-1"],
            &["--hosts", "1..=65535"],
        ),
        (
            &["gen", "-w", "/dev/null", "--hosts", "70000"],
            &["--hosts", "1..=65535"],
        ),
        (&["gen", "-w", "/dev/null", "--hosts", "nan"], &["--hosts"]),
        (
            &["gen", "-w", "/dev/null", "--dscp", "64"],
            &["--dscp", "0..=63"],
        ),
        (
            &["gen", "-w", "/dev/null", "--size", "0"],
            &["--size", "65535"],
        ),
        (
            &["gen", "-w", "/dev/null", "--size", "70000"],
            &["--size", "65535"],
        ),
        (&["gen", "-i", "lo", "--batch", "0"], &["--batch"]),
        (
            &["gen", "-i", "lo", "--ring-frames", "0"],
            &["--ring-frames"],
        ),
        (
            &["gen", "-i", "lo", "--ring-frames", "16", "--batch", "64"],
            &["--batch 64", "--ring-frames 16"],
        ),
        (
            &["extract", f, "-w", "/dev/null", "--from", "1e30"],
            &["--from", "1970 to 2554"],
        ),
        (
            &["extract", f, "-w", "/dev/null", "--from", "-5"],
            &["--from"],
        ),
        (
            &[
                "extract",
                f,
                "-w",
                "/dev/null",
                "--from",
                "20",
                "--to",
                "10",
            ],
            &["--from is after --to"],
        ),
        (
            &[
                "extract",
                "--sensor",
                "http://127.0.0.1:1",
                "-w",
                "/dev/null",
                "--sensor-timeout",
                "0",
            ],
            &["--sensor-timeout", "1..=86400"],
        ),
        (
            &[
                "extract",
                "--sensor",
                "http://127.0.0.1:1",
                "-w",
                "/dev/null",
                "--sensor-timeout",
                "-1",
            ],
            &["--sensor-timeout", "'-1'"],
        ),
        (
            &[
                "extract",
                "--sensor",
                "http://127.0.0.1:1",
                "-w",
                "/dev/null",
                "--sensor-timeout",
                "86401",
            ],
            &["--sensor-timeout", "1..=86400"],
        ),
        (
            &[
                "extract",
                "--sensor",
                "http://127.0.0.1:1",
                "-w",
                "/dev/null",
                "--sensor-timeout",
                "nan",
            ],
            &["--sensor-timeout"],
        ),
        (
            &["extract", f, "-w", "/dev/null", "--sensor-timeout", "5"],
            &["--sensor-timeout", "--sensor"],
        ),
        (
            &["extract", f, "-w", "/dev/null", "--sensor-min-rate", "5"],
            &["--sensor-min-rate", "--sensor"],
        ),
        (
            &["gen", "-w", "/dev/null", "--pps", "10", "--vlan", "4096"],
            &["--vlan", "VID (0-4095)"],
        ),
        (
            &["gen", "-w", "/dev/null", "--pps", "10", "--vlan", "100:8"],
            &["--vlan", "priority 0-7"],
        ),
        (
            &["gen", "-w", "/dev/null", "--pps", "10", "--vlan", "nan"],
            &["--vlan", "VID (0-4095)"],
        ),
        (
            &["gen", "-w", "/dev/null", "--pps", "10", "--vlan", "-1"],
            &["--vlan", "VID (0-4095)"],
        ),
        (
            &["extract", "--sensor", "", "-w", "/dev/null"],
            &["--sensor", "http://HOST:PORT"],
        ),
        (
            &["extract", "--sensor", "ftp://a:1", "-w", "/dev/null"],
            &["--sensor ftp://a:1", "http://HOST:PORT"],
        ),
        (
            &["extract", "--sensor", "http://a:1/x", "-w", "/dev/null"],
            &["--sensor http://a:1/x", "no path"],
        ),
        (
            &[
                "extract",
                "--sensor",
                "http://a:1,http://a:1/",
                "-w",
                "/dev/null",
            ],
            &["--sensor http://a:1/ is given twice"],
        ),
        (
            &["serve", "--store", "/nonexistent", "--token", ""],
            &["--token", "visible ASCII"],
        ),
        (
            &["serve", "--store", "/nonexistent", "--token", " "],
            &["--token", "visible ASCII"],
        ),
        (
            &["serve", "--store", "/nonexistent", "--token", "a b"],
            &["--token", "visible ASCII"],
        ),
        (
            &[
                "extract",
                "--sensor",
                "http://127.0.0.1:1",
                "-w",
                "/dev/null",
                "--token",
                "a\r\nX-Evil: 1",
            ],
            &["--token", "visible ASCII"],
        ),
    ];
    for (args, words) in cases {
        assert_usage(args, words);
    }
    // A sensor's minimum rate, bytes per second: 0 (no minimum) to 10^9.
    for bad in [
        "-1",
        "nan",
        "inf",
        "1e30",
        "1000000001",
        "18446744073709551616",
    ] {
        assert_usage(
            &[
                "extract",
                "--sensor",
                "http://127.0.0.1:1",
                "-w",
                "/dev/null",
                "--sensor-min-rate",
                bad,
            ],
            &["--sensor-min-rate"],
        );
    }
    // Nothing was created by a refused command.
    assert!(
        !Path::new(store).exists(),
        "a refused record touched {store}"
    );
}

/// Item 19: `weir flows -r` meters with one worker per core by default.
/// `weir lab bql` and `weir lab tsq` take what the kernel takes (BQL's limit_max up to
/// DQL_MAX_LIMIT = 1879048192, TSQ a C int): anything else is a usage error naming the range,
/// before any bench is looked at, never a kernel error (EINVAL from sysfs) or a panic.
#[test]
fn lab_limits_are_usage_errors() {
    let name = format!("nob{}", std::process::id());
    let cases: &[(&[&str], &[&str])] = &[
        (&["lab", "bql", "1879048193"], &["0 to 1879048192 bytes"]),
        (&["lab", "bql", "4294967296"], &["0 to 1879048192 bytes"]),
        (&["lab", "bql", "-1"], &["'-1' is not a number of bytes"]),
        (
            &["lab", "bql", "99999999999999999999"],
            &["is not a number of bytes (0 to 1879048192)"],
        ),
        (&["lab", "bql", "3k"], &["'3k' is not a number of bytes"]),
        (&["lab", "tsq", "2147483648"], &["0 to 2147483647 bytes"]),
        (&["lab", "tsq", "-16384"], &["is not a number of bytes"]),
        (&["lab", "tsq", "NaN"], &["is not a number of bytes"]),
    ];
    for (args, words) in cases {
        let mut a = args.to_vec();
        a.extend(["--name", &name]);
        assert_usage(&a, words);
    }
    // In range, the value goes through: the error is then that there is no such bench.
    for knob in [["bql", "1879048192"], ["tsq", "2147483647"]] {
        let out = weir_bounded(&["lab", knob[0], knob[1], "--name", &name]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(err.contains(&format!("no bench '{name}'")), "{err}");
    }
}

#[test]
fn flows_default_to_one_worker_per_core() {
    let tmp = tempfile::tempdir().unwrap();
    let stats = tmp.path().join("stats.json");
    stdout_of(
        weir()
            .arg("flows")
            .arg("-r")
            .arg(mixed())
            .arg("--stats")
            .arg(&stats),
    );
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&stats).unwrap()).unwrap();
    let cores = std::thread::available_parallelism().unwrap().get().min(256);
    assert_eq!(v["workers"], cores as u64, "{v}");
}

/// Item 17: options before, after and between the words of the expression, as tcpdump (GNU
/// getopt) takes them; `--` ends the options; `-n` is accepted; an unknown option is named.
#[test]
fn options_may_follow_the_expression() {
    let f = mixed();
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (
        tmp.path().join("weir.pcap"),
        tmp.path().join("tcpdump.pcap"),
    );

    // weir read -r F -w o udp -c 1  ==  tcpdump -r F -w o2 -c 1 udp, byte for byte.
    for (weir_args, tcpdump_args) in [
        (vec!["udp", "-c", "1", "--micro"], vec!["-c", "1", "udp"]),
        (
            vec!["tcp", "--micro", "and", "port", "53", "-c", "3"],
            vec!["-c", "3", "tcp and port 53"],
        ),
        (vec!["--micro", "--", "udp"], vec!["udp"]),
    ] {
        stdout_of(
            weir()
                .arg("read")
                .arg("-r")
                .arg(&f)
                .arg("-w")
                .arg(&a)
                .args(&weir_args),
        );
        let t = run(Command::new("tcpdump")
            .arg("-r")
            .arg(&f)
            .arg("-w")
            .arg(&b)
            .args(&tcpdump_args));
        assert!(t.status.success(), "{}", String::from_utf8_lossy(&t.stderr));
        assert_eq!(
            std::fs::read(&a).unwrap(),
            std::fs::read(&b).unwrap(),
            "weir read {weir_args:?} vs tcpdump {tcpdump_args:?}"
        );
    }

    // decode -r F tcp -n: the lines of decode -r F -n tcp, as many as tcpdump prints.
    let after = stdout_of(weir().arg("decode").arg("-r").arg(&f).args(["tcp", "-n"]));
    let before = stdout_of(weir().args(["decode", "-n", "-r"]).arg(&f).arg("tcp"));
    let tcpdump = stdout_of(
        Command::new("tcpdump")
            .args(["-n", "-r"])
            .arg(&f)
            .arg("tcp"),
    );
    assert_eq!(after, before);
    assert_eq!(after.lines().count(), tcpdump.lines().count());
    assert_eq!(after.lines().count(), 10);
    // Clustered short options as tcpdump users type them: `-nr F -c1`.
    let clustered = stdout_of(weir().arg("decode").arg("-nr").arg(&f).args(["-c1", "tcp"]));
    assert_eq!(
        clustered.lines().collect::<Vec<_>>(),
        after.lines().take(1).collect::<Vec<_>>()
    );
    // `-nn` as tcpdump users type it.
    let nn = stdout_of(
        weir()
            .arg("decode")
            .arg("-r")
            .arg(&f)
            .args(["tcp", "-nn", "-c", "2"]),
    );
    assert_eq!(nn.lines().count(), 2);

    // extract D -w o udp --from T: the same packets as with the options first, as tcpdump's.
    let ts = tshark_fields(&f, &["frame.time_epoch"]);
    let from = ts[0][0].clone();
    let (c, d) = (tmp.path().join("x1.pcap"), tmp.path().join("x2.pcap"));
    stdout_of(
        weir()
            .arg("extract")
            .arg(&f)
            .arg("-w")
            .arg(&c)
            .args(["udp", "--from", &from, "--micro"]),
    );
    stdout_of(
        weir()
            .arg("extract")
            .arg(&f)
            .args(["--micro", "--from", &from, "-w"])
            .arg(&d)
            .arg("udp"),
    );
    assert_eq!(std::fs::read(&c).unwrap(), std::fs::read(&d).unwrap());
    let t = run(Command::new("tcpdump")
        .arg("-r")
        .arg(&f)
        .arg("-w")
        .arg(&b)
        .arg("udp"));
    assert!(t.status.success());
    assert_eq!(
        tshark_fields(&c, &["frame.time_epoch", "frame.len"]),
        tshark_fields(&b, &["frame.time_epoch", "frame.len"])
    );
    assert_eq!(tshark_fields(&c, &["frame.len"]).len(), 2);

    // An unknown option is named as such, wherever it is.
    let fs = f.to_str().unwrap();
    for args in [
        vec!["decode", "-X", "-r", fs],
        vec!["decode", "-r", fs, "tcp", "-X"],
        vec!["read", "-r", fs, "udp", "--bogus"],
    ] {
        let out = run(weir().args(&args));
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains("unknown option"), "{args:?}: {err}");
        assert!(!err.contains("required"), "{args:?}: {err}");
    }
}

/// Item 18: the expression's help is written once, the same in every subcommand that takes one.
#[test]
fn one_expression_help_everywhere() {
    let mut helps = Vec::new();
    for sub in ["read", "decode", "capture", "flows", "record", "extract"] {
        let h = stdout_of(weir().args([sub, "--help"]));
        // `  [EXPR]...  Help text`, or the text on the next line (long help).
        let lines: Vec<&str> = h.lines().collect();
        let at = lines
            .iter()
            .position(|l| l.trim_start().starts_with("[EXPR]..."))
            .unwrap_or_else(|| panic!("{sub}: {h}"));
        let same_line = lines[at].trim_start()["[EXPR]...".len()..].trim();
        let para = if same_line.is_empty() {
            lines[at + 1].trim().to_string()
        } else {
            same_line.to_string()
        };
        assert!(para.contains("tcpdump"), "{sub}: {para}");
        helps.push((sub, para));
    }
    for (sub, p) in &helps {
        assert_eq!(p, &helps[0].1, "EXPR help of {sub} vs {}", helps[0].0);
    }
}

/// Item 18: options the mode ignores are refused, not silently dropped.
#[test]
fn options_a_mode_ignores_are_refused() {
    let f = mixed();
    let f = f.to_str().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let store = store.to_str().unwrap();
    let out = tmp.path().join("o.pcap");
    let out = out.to_str().unwrap();
    let cases: &[(&[&str], &[&str])] = &[
        (
            &["record", "-r", f, "-o", store, "--slice", "l3"],
            &["--slice", "-r"],
        ),
        (
            &["record", "-r", f, "-o", store, "-s", "96"],
            &["--snaplen", "-r"],
        ),
        (&["flows", "-r", f, "--slice", "l4"], &["--slice", "-r"]),
        (
            &["flows", "-r", f, "--duration", "5"],
            &["--duration", "-r"],
        ),
        (
            &["read", "-r", f, "-w", out, "--micro", "--format", "pcapng"],
            &["--micro", "pcapng"],
        ),
        (
            &["extract", f, "-w", out, "--format", "pcapng", "--micro"],
            &["--micro", "pcapng"],
        ),
        (
            &[
                "capture", "-i", "lo", "-w", out, "--format", "pcapng", "--micro",
            ],
            &["--micro", "pcapng"],
        ),
        (
            &["read", "-r", f, "--format", "pcapng"],
            &["--format", "-w"],
        ),
        (
            &["flows", "-r", f, "--format", "v5"],
            &["--format", "--export"],
        ),
        (
            &["flows", "-r", f, "--json", "-", "--csv", "-"],
            &["--json", "--csv", "stdout"],
        ),
        (
            &["flows", "-r", f, "--export", "-", "--json", "-"],
            &["--export", "--json", "stdout"],
        ),
        (
            &[
                "flows",
                "-r",
                f,
                "--export",
                "-",
                "--format",
                "v9",
                "--ts-nanos",
            ],
            &["--ts-nanos", "ipfix"],
        ),
        (&["flows", "-i", "lo", "-r", f], &["-i", "-r"]),
        (&["record", "-i", "lo", "-r", f, "-o", store], &["-i", "-r"]),
        (
            &["record", "-i", "lo", "-o", store, "--flow-json", out],
            &["--flow-json", "--flows"],
        ),
        (
            &["gen", "-w", out, "--qdisc-bypass"],
            &["--qdisc-bypass", "-i"],
        ),
        (&["gen", "-i", "lo", "--start", "5"], &["--start", "-w"]),
    ];
    for (args, words) in cases {
        assert_usage(args, words);
    }
    assert!(!Path::new(store).exists());
    assert!(!Path::new(out).exists());
    // --micro alone means classic pcap with microseconds.
    let r = stdout_of(weir().args(["read", "--micro", "-r", f, "-w", out, "-c", "1"]));
    assert!(r.is_empty());
    assert_eq!(
        &std::fs::read(out).unwrap()[..4],
        &0xa1b2c3d4u32.to_le_bytes()
    );
}

/// Item 9: an interface given twice would have every packet captured twice: refused.
#[test]
fn duplicate_interfaces_are_refused() {
    for args in [
        &[
            "capture",
            "-i",
            "lo",
            "-i",
            "lo,lo",
            "-w",
            "/dev/null",
            "--duration",
            "1",
        ][..],
        &[
            "capture",
            "-i",
            "lo,lo",
            "-w",
            "/dev/null",
            "--duration",
            "1",
        ][..],
        &[
            "flows",
            "-i",
            "lo",
            "-i",
            "lo",
            "--duration",
            "1",
            "--json",
            "/dev/null",
        ][..],
    ] {
        assert_usage(args, &["lo given twice"]);
    }
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("s");
    let mut a = vec!["record", "-i", "lo,lo", "--duration", "1", "-o"];
    a.push(store.to_str().unwrap());
    assert_usage(&a, &["lo given twice"]);
    assert!(!store.exists());
}

/// Item 4: `-s 0` is tcpdump's "whole packet": every packet captured, whole, as tcpdump
/// captures them (old main dropped them all as "too long").
#[test]
fn snaplen_zero_captures_whole_packets() {
    let bench = VethBench::new();
    let tmp = tempfile::tempdir().unwrap();
    let (w, t) = (
        tmp.path().join("weir.pcapng"),
        tmp.path().join("tcpdump.pcap"),
    );
    let n = 20u32;
    let expr = "udp port 9777";
    let mut wc = weir();
    wc.args([
        "capture",
        "-s",
        "0",
        "-c",
        &n.to_string(),
        "-i",
        &bench.host_if,
        "-w",
    ])
    .arg(&w)
    .arg(expr);
    let weir_child = start(wc, "capturing on");
    let mut tc = Command::new("tcpdump");
    tc.args([
        "-n",
        "-s",
        "0",
        "-i",
        &bench.host_if,
        "-c",
        &n.to_string(),
        "-w",
    ])
    .arg(&t)
    .arg(expr);
    let tcpdump_child = start(tc, "listening on");
    bench.send_udp(9777, n, 1400);
    wait(weir_child);
    wait(tcpdump_child);
    let fields = ["frame.len", "frame.cap_len", "udp.payload"];
    let (wf, tf) = (tshark_fields(&w, &fields), tshark_fields(&t, &fields));
    assert_eq!(wf.len(), n as usize, "every packet captured");
    assert!(wf == tf, "not the packets tcpdump -s 0 captured");
    // 14 + 20 + 8 + 8 + 1400 bytes, all of them.
    let lens: Vec<(&str, &str)> = wf.iter().map(|f| (&*f[0], &*f[1])).collect();
    assert!(lens.iter().all(|&l| l == ("1450", "1450")), "{lens:?}");

    // record -s 0 and flows -i -s 0 go through the same pipeline: every packet kept.
    let store = tmp.path().join("store");
    let mut rc = weir();
    rc.args([
        "record",
        "-s",
        "0",
        "--buffer-mib",
        "16",
        "--segment-mib",
        "4",
    ])
    .args(["--duration", "5", "-i", &bench.host_if, "-o"])
    .arg(&store)
    .arg(expr);
    let rec = start(rc, "recording on");
    bench.send_udp(9777, n, 1400);
    wait(rec);
    let seg = common::segments(&store);
    let got: usize = seg
        .iter()
        .map(|s| tshark_fields(s, &["frame.cap_len"]).len())
        .sum();
    assert_eq!(got, n as usize, "record -s 0 kept every packet");
}
