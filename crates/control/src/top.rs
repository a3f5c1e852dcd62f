//! The frame of `weir top`: one screen of text made from two `counters` replies of a running
//! `weir run`'s control socket (rates are their differences over the difference of their
//! `elapsed_s`) and its `status` reply.
//!
//! Per job: state, interface, packets and bits per second read by capture, disk write rate,
//! buffer fill, drops per stage since the start (interface, kernel, buffer, writer), the rules'
//! totals and each live stream (matched, written, dropped). The socket offers no per-flow or
//! per-rule ranking yet, so the frame has no top flows or top rules.

use serde_json::Value;

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
    s.push_str("\n(top flows and top rules: not offered by the control socket yet)\n");
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
