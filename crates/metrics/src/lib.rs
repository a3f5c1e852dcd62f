//! Prometheus metrics for weir, with no async runtime and no dependency on the rest of weir.
//!
//! - [`text`]: the Prometheus text exposition format (version 0.0.4): one `# HELP` and one
//!   `# TYPE` line per family, its samples together, label values and help text escaped,
//!   counters named `..._total`. Written by hand rather than with the `prometheus-client`
//!   crate: that crate emits only OpenMetrics, whose counter families are typed without their
//!   `_total` suffix (`# TYPE weir_x counter` then `weir_x_total 5`), which `promtool check
//!   metrics` (the Prometheus text parser) reads as an untyped `weir_x_total` with no help.
//! - [`http`]: a small HTTP/1.1 server on a plain [`std::net::TcpListener`] thread answering
//!   `GET /metrics` (and `HEAD`) with what a render function returns, 404 elsewhere, with a
//!   bounded request size and timeouts, and no panic on garbage.
//! - [`process`]: the standard `process_cpu_seconds_total` and `process_resident_memory_bytes`
//!   from `/proc/self`, and the space left on a filesystem.
//!
//! The series themselves (what weir counts) are the jobs' to write: see `weir_sensor::metrics`.

pub mod http;
pub mod process;
pub mod text;

pub use http::{ServeError, Server, DEFAULT_ADDR};
pub use text::{Exposition, Kind};
