//! `weir voip`'s calls against sngrep's dialog list on the corpus' SIP files.
//!
//! sngrep has no batch output of its dialog list: `-N` (no interface) prints only a running
//! "Dialog count: N", `-O` writes packets, `-D` its settings. So the test runs sngrep's ncurses
//! interface in a detached tmux pane (no terminal needed) with a config file that makes the
//! columns Call-ID, SIP From, SIP To, Call State and Msgs wide enough, and reads the screen with
//! `tmux capture-pane -p`. sngrep has read the whole file when its list has `-N`'s number of
//! dialogs and their messages add up to the SIP messages tshark counts in the file (`-Y sip`):
//! the test waits for that (60 s at most), not for a time.
//!
//! Compared per Call-ID: from, to (both without the `sip:` scheme and URI parameters: sngrep
//! keeps the parameters of some URIs and not others), the message count, and the call state.
//! weir's records have no state field: the state is sngrep's state machine (sip_call.c,
//! `call_update_state`, 1.6) applied to the methods and status codes weir's records of the
//! Call-ID list, in order — dialogs not started by an INVITE have none; CALL SETUP until a
//! final answer; a CANCEL while setting up: CANCELLED; 2xx: IN CALL, then BYE: COMPLETED;
//! 480/486/600: BUSY; other codes above 400: REJECTED (a new INVITE sets CALL SETUP again,
//! so the last final answer counts); 301/302/181: DIVERTED.
//!
//! Differences explained: weir writes a Call-ID again once a call is over and has lingered
//! (REGISTER refreshes minutes apart): its records of one Call-ID are merged, in order, before
//! comparing (sngrep keeps one dialog per Call-ID). Files are those `weir voip` finds calls in
//! and those named `sip`: a scan of the whole corpus with `sngrep -N` (by hand, 2026-11-27)
//! found dialogs in these five files only.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// One dialog: (from, to, state, messages).
type Dialog = (String, String, String, u64);

/// weir's records of one Call-ID merged: (from, to, first method, messages, methods, codes).
type Merged = (String, String, String, u64, Vec<String>, Vec<u64>);

/// A URI as both tools are compared on it: no scheme, no parameters.
fn uri(s: &str) -> String {
    let s = s.trim();
    let s = s
        .strip_prefix("sips:")
        .or_else(|| s.strip_prefix("sip:"))
        .unwrap_or(s);
    s.split(';').next().unwrap_or("").to_string()
}

/// sngrep's call state for a dialog whose records (in order) list `methods` and `codes`.
fn state(first_method: &str, methods: &[String], codes: &[u64]) -> String {
    if first_method != "INVITE" {
        return String::new();
    }
    let cancelled = methods.iter().any(|m| m == "CANCEL");
    let answered = codes.iter().any(|c| (200..300).contains(c));
    let last_final = codes
        .iter()
        .rev()
        .find(|c| **c >= 200 || **c == 181)
        .copied();
    let s = if answered && methods.iter().any(|m| m == "BYE") {
        "COMPLETED"
    } else if answered {
        "IN CALL"
    } else if cancelled {
        "CANCELLED"
    } else {
        match last_final {
            Some(480 | 486 | 600) => "BUSY",
            Some(c) if c > 400 => "REJECTED",
            Some(181 | 301 | 302) => "DIVERTED",
            _ => "CALL SETUP",
        }
    };
    s.to_string()
}

/// weir's calls of `file`, merged per Call-ID.
fn weir_dialogs(file: &Path) -> BTreeMap<String, Dialog> {
    let o = common::run(common::weir().args(["voip", "-r"]).arg(file));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mut merged: BTreeMap<String, Merged> = BTreeMap::new();
    for line in String::from_utf8(o.stdout).unwrap().lines() {
        let r: serde_json::Value = serde_json::from_str(line).unwrap();
        if r["type"] != "call" {
            continue;
        }
        let s = |k: &str| r[k].as_str().unwrap_or("").to_string();
        let e = merged.entry(s("call_id")).or_insert_with(|| {
            (
                uri(&s("from")),
                uri(&s("to")),
                s("method"),
                0,
                Vec::new(),
                Vec::new(),
            )
        });
        e.3 += r["messages"].as_u64().unwrap();
        e.4.extend(
            r["methods"]
                .as_array()
                .unwrap()
                .iter()
                .map(|m| m.as_str().unwrap().to_string()),
        );
        e.5.extend(
            r["status_codes"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c.as_u64().unwrap()),
        );
    }
    merged
        .into_iter()
        .map(|(id, (from, to, method, n, methods, codes))| {
            let st = state(&method, &methods, &codes);
            (id, (from, to, st, n))
        })
        .collect()
}

/// `sngrep -N -I FILE`'s dialog count (its last "Dialog count: N").
fn sngrep_count(file: &Path) -> u64 {
    let o = common::run(
        Command::new("sngrep")
            .args(["-N", "-F", "-I"])
            .arg(file)
            .stdin(Stdio::null()),
    );
    let text = String::from_utf8_lossy(&o.stdout);
    text.rsplit("Dialog count: ")
        .next()
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("sngrep -N said {text:?}"))
}

/// A tmux server of the test's own (its socket name), killed when dropped with the sngrep
/// it runs (sngrep left without its terminal would spin).
struct Tmux(String);

impl Tmux {
    fn cmd(&self) -> Command {
        let mut c = Command::new("tmux");
        c.args(["-L", &self.0, "-f", "/dev/null"])
            .env("TERM", "xterm")
            .stdin(Stdio::null());
        c
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let pid = self
            .cmd()
            .args(["display-message", "-p", "-t", "0", "#{pane_pid}"])
            .output()
            .ok()
            .and_then(|o| {
                String::from_utf8_lossy(&o.stdout)
                    .trim()
                    .parse::<u32>()
                    .ok()
            });
        if let Some(pid) = pid {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .output();
        }
        let _ = self.cmd().arg("kill-server").output();
    }
}

/// The columns' left edges in sngrep's header line.
fn columns(header: &str) -> Vec<usize> {
    ["Call-ID", "SIP From", "SIP To", "Call State", "Msgs"]
        .iter()
        .map(|h| {
            header
                .find(h)
                .unwrap_or_else(|| panic!("no {h} in {header}"))
        })
        .collect()
}

/// The rows of sngrep's call list on `screen`.
fn screen_dialogs(screen: &str) -> BTreeMap<String, Dialog> {
    let mut out = BTreeMap::new();
    let Some(header) = screen.lines().find(|l| l.contains("Call-ID")) else {
        return out;
    };
    let cols = columns(header);
    for row in screen.lines().filter(|l| l.trim_start().starts_with("[ ]")) {
        let cell = |i: usize| -> String {
            let end = cols.get(i + 1).copied().unwrap_or(row.len()).min(row.len());
            row.get(cols[i].min(row.len())..end)
                .unwrap_or("")
                .trim()
                .to_string()
        };
        let msgs = cell(4)
            .split_whitespace()
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        out.insert(cell(0), (uri(&cell(1)), uri(&cell(2)), cell(3), msgs));
    }
    out
}

/// sngrep's dialog list of `file`, read from its screen once it has read the whole file.
fn sngrep_dialogs(
    file: &Path,
    n: u64,
    messages: u64,
    conf: &Path,
    id: usize,
) -> BTreeMap<String, Dialog> {
    let tmux = Tmux(format!("weir-sngrep-{}-{id}", std::process::id()));
    let height = (n + 20).to_string();
    let o = common::run(
        tmux.cmd()
            .args([
                "new-session",
                "-d",
                "-x",
                "420",
                "-y",
                &height,
                "sngrep",
                "-F",
                "-f",
            ])
            .arg(conf)
            .arg("-I")
            .arg(file),
    );
    assert!(
        o.status.success(),
        "tmux: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let t = Instant::now();
    loop {
        let o = common::run(tmux.cmd().args(["capture-pane", "-p", "-t", "0"]));
        let screen = String::from_utf8_lossy(&o.stdout).into_owned();
        let got = screen_dialogs(&screen);
        let total: u64 = got.values().map(|d| d.3).sum();
        if got.len() as u64 == n && total == messages {
            return got;
        }
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "{}: sngrep shows {} of {n} dialogs, {total} of {messages} messages:\n{screen}",
            file.display(),
            got.len()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn calls_equal_sngreps_dialogs_on_the_corpus() {
    let tmp = tempfile::tempdir().unwrap();
    let conf = tmp.path().join("sngreprc");
    std::fs::write(
        &conf,
        "set cl.columns 5\n\
         set cl.column0 callid\nset cl.column0.width 100\n\
         set cl.column1 sipfrom\nset cl.column1.width 80\n\
         set cl.column2 sipto\nset cl.column2.width 80\n\
         set cl.column3 state\nset cl.column3.width 14\n\
         set cl.column4 msgcnt\nset cl.column4.width 6\n",
    )
    .unwrap();
    let (mut files, mut dialogs, mut states) = (0, 0, 0);
    for file in common::corpus() {
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        let ours = weir_dialogs(&file);
        if ours.is_empty() && !name.contains("sip") {
            continue;
        }
        let n = sngrep_count(&file);
        assert_eq!(
            n,
            ours.len() as u64,
            "{name}: sngrep -N vs weir's Call-IDs {ours:#?}"
        );
        if n == 0 {
            continue;
        }
        let messages = tshark_sip_messages_filtered(&file);
        let theirs = sngrep_dialogs(&file, n, messages, &conf, files);
        assert_eq!(ours, theirs, "{name}");
        files += 1;
        dialogs += ours.len();
        states += ours.values().filter(|d| !d.2.is_empty()).count();
    }
    eprintln!("sngrep: {files} files, {dialogs} dialogs equal ({states} with a call state)");
    assert!(
        files >= 5 && dialogs >= 12,
        "{files} files, {dialogs} dialogs"
    );
}

/// SIP messages in `file` (tshark `-Y sip`).
fn tshark_sip_messages_filtered(file: &Path) -> u64 {
    let o = common::run(Command::new("tshark").arg("-r").arg(file).args([
        "-Y",
        "sip",
        "-T",
        "fields",
        "-e",
        "frame.number",
    ]));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).lines().count() as u64
}
