//! The setups of a study, applied to the bench's bottleneck (the router's `out0`) or, for TCP
//! small queues, to the sender: a qdisc through `tc`, byte queue limits through sysfs, TSQ
//! through sysctl, XDP forwarding through [`crate::xdp`]. Each says plainly when the kernel does
//! not offer what is asked.

use crate::bench::{Bench, Role};
use crate::caps::Capabilities;
use crate::LabError;

/// The bottleneck interface (in the router's namespace).
pub const BOTTLENECK: &str = "out0";

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
