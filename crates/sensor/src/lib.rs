//! The jobs weir runs on a live pipeline or on files: [`record`] (a store of segments, with the
//! flow meter beside it), [`capture`] (the buffer to one capture file, or any
//! [`capture::PacketSink`]), [`flows`] (live or files into the flow meter), [`read`] (the loop
//! of every offline command: filter, rules, damage), each with its rules ([`rules`]) and the
//! source of its packets ([`live`]). The commands (`weir record`, `capture`, `flows`, `read`...)
//! build these jobs from their arguments; `weir run` builds the same ones
//! from a config file.
//!
//! A job is configured with plain structs (no command-line types), runs on the caller's thread
//! (its helpers on their own: the recorder, the flow meter, the control socket), tells what
//! happens as [`Event`]s the caller prints or logs, and returns a report of counters the caller
//! formats. Stopping is the caller's: a flag it sets (the CLI on SIGINT/SIGTERM) ends the job
//! cleanly, capture first, then everything already in the buffer is written; another flag
//! reloads the rules (the CLI sets it on SIGHUP).
//!
//! [`config`] reads the file of `weir run` (jobs, stores, flows, rules, control socket) and
//! [`service`] runs its jobs side by side, one thread each, with one control socket.
#![deny(missing_docs)]
#![forbid(unsafe_code)]

#[cfg(feature = "clap")]
pub mod args;
pub mod capture;
pub mod config;
pub mod convert;
mod error;
pub mod flows;
pub mod http;
pub mod info;
pub mod lines;
pub mod live;
pub mod log;
pub mod metrics;
pub mod output;
pub use weir_capture::privilege;
pub mod read;
pub mod record;
pub mod rules;
pub mod service;
pub mod sink;
pub mod stream;
pub mod voip;
pub mod web;

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

pub use error::SensorError;

/// What a running job tells its caller.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    /// Something the operator should know (the CLI prints `weir: TEXT`).
    Notice(String),
    /// Something went wrong but the job goes on (the CLI prints `weir: warning: TEXT`).
    Warning(String),
    /// Once a second while recording: the rates and drops.
    Progress(record::Progress),
}

/// How the caller steers a running job.
#[derive(Clone, Debug)]
pub struct Controls {
    /// Set to stop the job cleanly (capture stops, what was captured is written).
    pub stop: Arc<AtomicBool>,
    /// Set to reload the rule file (cleared by the job when it has); static, so that a signal
    /// handler can set it.
    pub reload: &'static AtomicBool,
    /// Where the job publishes its counters for a Prometheus scrape ([`metrics::Board`]).
    pub metrics: Option<Arc<metrics::Board>>,
    /// Where the job publishes its live counters and its rule engine for a control socket
    /// (`weir run`'s `status`, `counters`, `rules.*`); `None`: nobody asks.
    pub published: Option<Arc<service::Published>>,
    /// New settings for the job's flow meter (`[record.flows]` changed on a reload): the job
    /// takes them and restarts its meter only, capture and recording going on
    /// ([`record::run`]).
    pub new_flows: Arc<std::sync::Mutex<Option<record::FlowsConfig>>>,
}

/// The reload flag of [`Controls::default`]: nobody sets it.
static NO_RELOAD: AtomicBool = AtomicBool::new(false);

impl Default for Controls {
    fn default() -> Controls {
        Controls {
            stop: Arc::default(),
            reload: &NO_RELOAD,
            metrics: None,
            published: None,
            new_flows: Arc::default(),
        }
    }
}
