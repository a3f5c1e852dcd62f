//! The frame of `weir top`: one screen of text made from two `counters` replies of a running
//! `weir run`'s control socket (rates are their differences over the difference of their
//! `elapsed_s`) and its `status` reply.
//!
//! Per job: state, interface, packets and bits per second read by capture, disk write rate,
//! buffer fill, drops per stage since the start (interface, kernel, buffer, writer), the rules'
//! totals and each live stream (matched, written, dropped); then, from the `top` reply
//! ([`top_text`]), each job's biggest open flows and the rules with most hits over the last
//! interval ([`top_rules`] makes the rules' part of that reply).

use std::collections::HashMap;
use std::time::Instant;

use serde_json::{json, Value};
use weir_rules::Engine;

/// Most exact rules [`top_rules`] looks at (a million exact rules are ranked over the first
/// ones only; the reply says how many it ranked).
pub const TOP_EXACT_LIMIT: usize = 100_000;

/// The rule counters an interval of [`top_rules`] starts from.
#[derive(Debug, Default)]
pub struct RulesBase {
    /// The base: when, and packets per rule (kind, id and text); `None` before the first
    /// ranking a second old.
    base: Option<(Instant, HashMap<String, u64>)>,
    /// The latest ranking's counters while younger than a second (then the base).
    pending: Option<(Instant, HashMap<String, u64>)>,
}

/// The `n` rules of `engine` with most hits over the last interval (since the latest earlier
/// ranking at least a second old, kept in `base`; since the start while there is none),
/// biggest first (ties: most hits since the start, then the order of the rule set); rules with
/// no hit since the start are left out. One listing of the rules: O(rules), at most
/// [`TOP_EXACT_LIMIT`] exact ones.
pub fn top_rules(engine: &Engine, n: usize, state: &mut Option<RulesBase>) -> Value {
    let st = state.get_or_insert_with(RulesBase::default);
    if st
        .pending
        .as_ref()
        .is_some_and(|p| p.0.elapsed() >= std::time::Duration::from_secs(1))
    {
        st.base = st.pending.take();
    }
    let base = st.base.as_ref();
    let listing = engine.list(TOP_EXACT_LIMIT);
    let mut now: HashMap<String, u64> = HashMap::new();
    let mut ranked: Vec<(u64, u64, usize, Value)> = Vec::new();
    for (i, r) in listing.wild.iter().chain(&listing.exact).enumerate() {
        let v = crate::rules::listed_json(r);
        let name = format!("{} {} {}", v["kind"], v["id"], v["rule"]);
        let total = r.stats.packets;
        let before = base.and_then(|b| b.1.get(&name).copied()).unwrap_or(0);
        now.insert(name, total);
        if total > 0 {
            ranked.push((total.saturating_sub(before), total, i, v));
        }
    }
    ranked.sort_by(|a, b| b.0.cmp(&a.0).then(b.1.cmp(&a.1)).then(a.2.cmp(&b.2)));
    let interval_s = base.map(|b| b.0.elapsed().as_secs_f64());
    let rules: Vec<Value> = ranked
        .into_iter()
        .take(n)
        .map(|(interval, _, _, v)| {
            json!({
                "id": v["id"], "kind": v["kind"], "rule": v["rule"],
                "interval_packets": interval, "packets": v["packets"], "bytes": v["bytes"],
            })
        })
        .collect();
    if st.pending.is_none() {
        st.pending = Some((Instant::now(), now));
    }
    json!({
        "version": listing.version,
        "interval_s": interval_s,
        "ranked": listing.wild.len() + listing.exact.len(),
        "exact_total": listing.exact_total,
        "rules": rules,
    })
}

/// Each job's part of a `top` reply as text: its biggest open flows (over the interval and
/// since they started) and its rules with most hits over the interval.
pub fn top_text(top: &Value) -> String {
    let mut s = String::new();
    let by = top["by"].as_str().unwrap_or("bytes");
    let Some(jobs) = top["jobs"].as_object() else {
        return s;
    };
    let flow = |f: &Value, interval: bool| {
        let (p, b) = if interval {
            (&f["interval_packets"], &f["interval_bytes"])
        } else {
            (&f["packets"], &f["bytes"])
        };
        let ep = |a: &Value, port: &Value| match a.as_str() {
            Some(a) if a.contains(':') => format!("[{a}]:{}", n(port)),
            Some(a) => format!("{a}:{}", n(port)),
            None => "?".into(),
        };
        format!(
            "  {:>5} {:>23} -> {:<23} {:>12} {:>14}\n",
            n(&f["proto"]),
            ep(&f["src"], &f["src_port"]),
            ep(&f["dst"], &f["dst_port"]),
            n(p),
            n(b)
        )
    };
    for (name, j) in jobs {
        let fl = &j["flows"];
        if let Some(e) = fl["error"].as_str() {
            s.push_str(&format!("\n{name}: top flows: {e}\n"));
        } else if fl.is_object() {
            for (key, title, interval) in [
                (
                    "interval",
                    format!("over the last {:.1} s", f(&fl["interval_s"])),
                    true,
                ),
                ("since_start", "since they started".to_string(), false),
            ] {
                s.push_str(&format!(
                    "\n{name}: top flows by {by} {title} ({} open)\n  {:>5} {:>23}    {:<23} {:>12} {:>14}\n",
                    n(&fl["open"]),
                    "PROTO",
                    "SOURCE",
                    "DESTINATION",
                    "PACKETS",
                    "BYTES"
                ));
                for x in fl[key].as_array().into_iter().flatten() {
                    s.push_str(&flow(x, interval));
                }
            }
        }
        let ru = &j["rules"];
        if ru.is_object() {
            s.push_str(&format!(
                "\n{name}: top rules by hits {}\n  {:>6} {:>12} {:>12}  RULE\n",
                ru["interval_s"]
                    .as_f64()
                    .map_or("since the start".to_string(), |t| format!(
                        "over the last {t:.1} s"
                    )),
                "ID",
                "HITS",
                "SINCE START"
            ));
            for r in ru["rules"].as_array().into_iter().flatten() {
                s.push_str(&format!(
                    "  {:>6} {:>12} {:>12}  {}\n",
                    r["id"].as_u64().map_or("-".to_string(), |i| i.to_string()),
                    n(&r["interval_packets"]),
                    n(&r["packets"]),
                    r["rule"].as_str().unwrap_or("?")
                ));
            }
        }
    }
    s
}

fn n(v: &Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or(0.0)
}

/// `x` with an SI prefix (`1.23 M`).
pub fn si(x: f64) -> String {
    let (d, p) = if x >= 1e9 {
        (1e9, "G")
    } else if x >= 1e6 {
        (1e6, "M")
    } else if x >= 1e3 {
        (1e3, "k")
    } else {
        (1.0, "")
    };
    format!("{:.2} {p}", x / d)
}

/// One job's rates between two counter objects (`None` before the first refresh).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Rates {
    /// Packets per second read by capture.
    pub pps: f64,
    /// Bits per second on the wire.
    pub bps: f64,
    /// Bytes per second written to disk.
    pub disk_bps: f64,
}

/// The rates between `prev` and `now` (a job's counters), from their `elapsed_s`.
pub fn rates(prev: &Value, now: &Value) -> Option<Rates> {
    let dt = f(&now["elapsed_s"]) - f(&prev["elapsed_s"]);
    if dt.is_nan() || dt <= 0.0 {
        return None;
    }
    let d = |a: &Value, b: &Value| n(b).saturating_sub(n(a)) as f64 / dt;
    Some(Rates {
        pps: d(&prev["capture"]["received"], &now["capture"]["received"]),
        bps: 8.0
            * d(
                &prev["capture"]["wire_bytes"],
                &now["capture"]["wire_bytes"],
            ),
        disk_bps: d(&prev["writer"]["disk_bytes"], &now["writer"]["disk_bytes"]),
    })
}

/// The frame: `status` and two `counters` replies (`prev` may be the same as `now`: rates are
/// then shown as `-`).
pub fn frame(status: &Value, prev: &Value, now: &Value) -> String {
    let mut s = format!(
        "weir top — pid {} — {} — up {:.0} s\n",
        n(&status["pid"]),
        status["config"].as_str().unwrap_or("?"),
        f(&status["uptime_s"])
    );
    let jobs = status["jobs"].as_array().cloned().unwrap_or_default();
    s.push_str(&format!(
        "{:<12} {:<10} {:<8} {:>12} {:>12} {:>12} {:>6}\n",
        "JOB", "INTERFACE", "STATE", "PKT/S", "BIT/S", "DISK B/S", "FILL"
    ));
    for j in &jobs {
        let name = j["name"].as_str().unwrap_or("?");
        let c = &now["jobs"][name];
        let r = rates(&prev["jobs"][name], c);
        let show = |x: Option<f64>| x.map_or("-".to_string(), si);
        s.push_str(&format!(
            "{:<12} {:<10} {:<8} {:>12} {:>12} {:>12} {:>5.1}%\n",
            name,
            j["interface"].as_str().unwrap_or("?"),
            j["state"].as_str().unwrap_or("?"),
            show(r.map(|r| r.pps)),
            show(r.map(|r| r.bps)),
            show(r.map(|r| r.disk_bps)),
            100.0 * f(&c["buffer"]["fill"]),
        ));
    }
    s.push_str("\ndrops since the start\n");
    s.push_str(&format!(
        "{:<12} {:>10} {:>10} {:>10} {:>10} {:>10} {:>12}\n",
        "JOB", "INTERFACE", "BACKLOG", "KERNEL", "BUFFER", "WRITER", "RECORDED"
    ));
    for j in &jobs {
        let name = j["name"].as_str().unwrap_or("?");
        let c = &now["jobs"][name];
        let cap = &c["capture"];
        s.push_str(&format!(
            "{:<12} {:>10} {:>10} {:>10} {:>10} {:>10} {:>12}\n",
            name,
            n(&cap["if_rx_dropped"]) + n(&cap["if_rx_missed"]) + n(&cap["if_rx_fifo"]),
            n(&cap["softnet_dropped"]),
            n(&cap["kernel_drops"]),
            n(&c["buffer"]["dropped_full"]) + n(&c["buffer"]["dropped_too_long"]),
            n(&c["writer"]["dropped"]),
            n(&c["writer"]["packets"]),
        ));
    }
    let mut streams = String::new();
    let mut rules = String::new();
    for j in &jobs {
        let name = j["name"].as_str().unwrap_or("?");
        let c = &now["jobs"][name];
        if let Some(m) = c["streams"].as_object() {
            for (sn, v) in m {
                streams.push_str(&format!(
                    "{:<12} {:<12} {:>10} {:>10} {:>10} {:>8}\n",
                    name,
                    sn,
                    n(&v["matched"]),
                    n(&v["written"]),
                    n(&v["dropped"]),
                    if v["attached"].as_bool() == Some(true) {
                        "yes"
                    } else {
                        "no"
                    }
                ));
            }
        }
        if c["rules"].is_object() {
            rules.push_str(&format!(
                "{:<12} {:>10} {:>10} {:>10}\n",
                name,
                n(&c["capture"]["rules_dropped"]),
                n(&c["capture"]["rules_sliced"]),
                n(&c["capture"]["tagged"]),
            ));
        }
    }
    if !streams.is_empty() {
        s.push_str(&format!(
            "\nstreams\n{:<12} {:<12} {:>10} {:>10} {:>10} {:>8}\n{streams}",
            "JOB", "STREAM", "MATCHED", "WRITTEN", "DROPPED", "READER"
        ));
    }
    if !rules.is_empty() {
        s.push_str(&format!(
            "\nrules\n{:<12} {:>10} {:>10} {:>10}\n{rules}",
            "JOB", "DROPPED", "SLICED", "TAGGED"
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn rates_are_differences_over_elapsed() {
        let a = json!({"elapsed_s": 1.0, "capture": {"received": 100, "wire_bytes": 1000},
                       "writer": {"disk_bytes": 0}});
        let b = json!({"elapsed_s": 3.0, "capture": {"received": 300, "wire_bytes": 3000},
                       "writer": {"disk_bytes": 4096}});
        let r = rates(&a, &b).unwrap();
        assert_eq!(r.pps, 100.0);
        assert_eq!(r.bps, 8000.0);
        assert_eq!(r.disk_bps, 2048.0);
        assert_eq!(rates(&b, &b), None);
        assert_eq!(si(1_234_000.0), "1.23 M");
    }
}
