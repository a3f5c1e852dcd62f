//! The setups of a study, applied to the bench's bottleneck (the router's `out0`) or, for TCP
//! small queues, to the sender: a qdisc through `tc`, byte queue limits through sysfs, TSQ
//! through sysctl, XDP forwarding through [`crate::xdp`]. Each says plainly when the kernel does
//! not offer what is asked.

use crate::bench::{Bench, Role};
use crate::caps::Capabilities;
use crate::LabError;

/// The bottleneck interface (in the router's namespace), the bench's.
pub use crate::bench::BOTTLENECK;

/// The largest byte queue limit the kernel takes: `DQL_MAX_LIMIT`, (UINT_MAX / 2) -
/// (UINT_MAX / 16) (include/linux/dynamic_queue_limits.h); sysfs refuses more with EINVAL.
pub const BQL_MAX: u64 = (u32::MAX as u64 / 2) - (u32::MAX as u64 / 16);

/// The largest TCP small queues limit: `tcp_limit_output_bytes` is a C `int`.
pub const TSQ_MAX: u64 = i32::MAX as u64;

/// Checks a byte queue limit (0 to [`BQL_MAX`] bytes) before the kernel sees it.
pub fn check_bql(limit: u64) -> Result<u64, LabError> {
    if limit > BQL_MAX {
        return Err(LabError::Config(format!(
            "byte queue limit {limit} is out of range: 0 to {BQL_MAX} bytes"
        )));
    }
    Ok(limit)
}

/// Checks a TCP small queues limit (0 to [`TSQ_MAX`] bytes) before the kernel sees it.
pub fn check_tsq(bytes: u64) -> Result<u64, LabError> {
    if bytes > TSQ_MAX {
        return Err(LabError::Config(format!(
            "TCP small queues limit {bytes} is out of range: 0 to {TSQ_MAX} bytes"
        )));
    }
    Ok(bytes)
}

fn parse_bytes(s: &str, check: fn(u64) -> Result<u64, LabError>, max: u64) -> Result<u64, String> {
    let v: u64 = s
        .trim()
        .parse()
        .map_err(|_| format!("'{s}' is not a number of bytes (0 to {max})"))?;
    check(v).map_err(|e| e.to_string())
}

/// Parses a byte queue limit given as text (a command-line value), checked as [`check_bql`].
pub fn parse_bql(s: &str) -> Result<u64, String> {
    parse_bytes(s, check_bql, BQL_MAX)
}

/// Parses a TCP small queues limit given as text, checked as [`check_tsq`].
pub fn parse_tsq(s: &str) -> Result<u64, String> {
    parse_bytes(s, check_tsq, TSQ_MAX)
}

fn tc_error(e: LabError) -> LabError {
    match e {
        LabError::Command { cmd, stderr } => LabError::Unsupported(format!("{cmd}: {stderr}")),
        other => other,
    }
}

/// Puts qdisc `kind` with `args` at the root of the bottleneck (replacing what was there).
pub fn qdisc(
    bench: &Bench,
    caps: Option<&Capabilities>,
    kind: &str,
    args: &[&str],
) -> Result<(), LabError> {
    if let Some(why) = caps.and_then(|c| c.qdisc_missing(kind)) {
        return Err(LabError::Unsupported(format!(
            "qdisc {kind} is not offered by this kernel ({why})"
        )));
    }
    let mut cmd = vec!["tc", "qdisc", "replace", "dev", BOTTLENECK, "root", kind];
    cmd.extend_from_slice(args);
    bench.exec(Role::Router, &cmd).map(|_| ()).map_err(tc_error)
}

/// Runs raw `tc` arguments in the router's namespace, `{dev}` standing for the bottleneck.
pub fn tc(bench: &Bench, line: &str) -> Result<(), LabError> {
    let line = line.replace("{dev}", BOTTLENECK);
    let mut cmd = vec!["tc"];
    cmd.extend(line.split_whitespace());
    bench.exec(Role::Router, &cmd).map(|_| ()).map_err(tc_error)
}

/// Removes the bottleneck's root qdisc (back to the default).
pub fn reset_qdisc(bench: &Bench) {
    let _ = bench.exec(
        Role::Router,
        &["tc", "qdisc", "del", "dev", BOTTLENECK, "root"],
    );
}

/// Sets the byte queue limit (`limit_max`, bytes) of every TX queue of the bottleneck.
pub fn bql(bench: &Bench, limit: u64) -> Result<(), LabError> {
    check_bql(limit)?;
    let dir = format!("/sys/class/net/{BOTTLENECK}/queues");
    let probe = bench.exec(
        Role::Router,
        &["test", "-d", &format!("{dir}/tx-0/byte_queue_limits")],
    );
    if probe.is_err() {
        return Err(LabError::Unsupported(format!(
            "{BOTTLENECK} is a veth, which has no byte queue limits (no {dir}/tx-0/byte_queue_limits): BQL cannot be set here"
        )));
    }
    let script =
        format!("for q in {dir}/tx-*/byte_queue_limits; do echo {limit} > $q/limit_max; done");
    bench.exec(Role::Router, &["sh", "-c", &script]).map(|_| ())
}

/// Sets TCP small queues on the sender (`net.ipv4.tcp_limit_output_bytes`, bytes).
pub fn tsq(bench: &Bench, bytes: u64) -> Result<(), LabError> {
    check_tsq(bytes)?;
    let key = "net.ipv4.tcp_limit_output_bytes";
    bench
        .exec(Role::Sender, &["sysctl", "-qw", &format!("{key}={bytes}")])
        .map(|_| ())
        .map_err(|e| LabError::Unsupported(format!("TCP small queues: {e}")))
}

/// The sender's current TSQ limit.
pub fn tsq_current(bench: &Bench) -> Option<u64> {
    let out = bench
        .exec(
            Role::Sender,
            &["sysctl", "-n", "net.ipv4.tcp_limit_output_bytes"],
        )
        .ok()?;
    String::from_utf8_lossy(&out.stdout).trim().parse().ok()
}

/// Turns XDP forwarding from the router's `in0` to `out0` on or off (see [`crate::xdp`]).
pub fn xdp(bench: &Bench, on: bool) -> Result<(), LabError> {
    let state = bench.state()?;
    if on {
        crate::xdp::forward_on(bench, &state)
    } else {
        crate::xdp::forward_off(bench)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_are_checked_against_the_kernel_ranges() {
        // DQL_MAX_LIMIT = 2147483647 - 268435455.
        assert_eq!(BQL_MAX, 1_879_048_192);
        assert_eq!(TSQ_MAX, 2_147_483_647);
        assert_eq!(parse_bql("3000"), Ok(3000));
        assert_eq!(parse_bql("0"), Ok(0));
        assert_eq!(parse_bql("1879048192"), Ok(BQL_MAX));
        assert_eq!(
            parse_bql("1879048193"),
            Err("byte queue limit 1879048193 is out of range: 0 to 1879048192 bytes".into())
        );
        assert_eq!(
            parse_bql("-1"),
            Err("'-1' is not a number of bytes (0 to 1879048192)".into())
        );
        assert_eq!(
            parse_bql("99999999999999999999"),
            Err("'99999999999999999999' is not a number of bytes (0 to 1879048192)".into())
        );
        assert_eq!(parse_tsq("2147483647"), Ok(TSQ_MAX));
        assert_eq!(
            parse_tsq("2147483648"),
            Err("TCP small queues limit 2147483648 is out of range: 0 to 2147483647 bytes".into())
        );
        assert_eq!(
            parse_tsq("1e6"),
            Err("'1e6' is not a number of bytes (0 to 2147483647)".into())
        );
    }
}
