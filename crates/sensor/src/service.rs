//! `weir run`: the jobs of a config file ([`crate::config`]) side by side in one process, one
//! thread each (two interfaces: two record jobs, each with its own pipeline, store, flow meter
//! and rules), and one control socket for all of them.
//!
//! The control socket (JSON lines, see [`weir_control`]) answers, besides `help`:
//!
//! | request | reply (besides `"ok": true`) |
//! |---|---|
//! | `{"cmd":"status"}` | `pid`, `config`, `uptime_s`, `jobs`: each `{name, kind, interface, interface_present, store, rules, state, paused, index_lag_s, uptime_s, error}` (`index_lag_s`: seconds the packets recorded since the open segment's index was last written have waited, `null` without an index or before recording); `state` is `starting`, `running`, `stopping`, `stopped` or `failed` |
//! | `{"cmd":"counters"}` | `jobs`: each job's name → its live counters (the same object as `weir record --stats-json`: `capture`, `buffer`, `writer`, `flows`, `rules`), refreshed every second; `null` until the first second |
//! | `{"cmd":"rules.list" ...}` and the other rule commands of [`weir_control::rules`] | the job's reply; with several jobs that have rules, the request names one with `"job": NAME` |
//!
//! | `{"cmd":"top"}`, with `"n"` (1..=1000, default 10), `"by"` (`"bytes"` or `"packets"`), `"job"` | `n`, `by`, `jobs`: each job's name → `{flows, rules}`: `flows` (`null` without a meter) `{open, interval_s, interval, since_start}`, the `n` biggest open flows over the last interval and since they started, each `{proto, src, src_port, dst, dst_port, vlan, packets, bytes, interval_packets, interval_bytes, start_ns}`, ranked on the meter's thread between two batches ([`weir_flows::TopFlowsHandle`]); `rules` (`null` without rules) `{interval_s, ranked, rules}`: the `n` rules with most hits over the last interval, each `{id, kind, rule, interval_packets, packets, bytes}` ([`weir_control::top::top_rules`]). The interval runs from the ranking before that is at least a second old |
//! | `{"cmd":"config.reload"}` | `queued`, `done`, `said`, `flows`, `warnings`: the config file is read again (as on SIGHUP, see [`run`]); answered once the reload is done and each flow meter it restarts has restarted or kept its old settings (see [`config_reload`]) |
//! | `{"cmd":"rotate"}`, `{"cmd":"rotate","job":NAME}` | `rotated`: `[{job, segments_started}]`, once each recorder closed its segment at a block boundary (the next packet starts a new one) |
//! | `{"cmd":"pause","job":NAME}`, `{"cmd":"resume","job":NAME}` | `job`, `paused`, `changed`, `paused_packets`: a paused job closes its segment and counts every packet it does not record (`paused_packets`, `weir_writer_paused_packets_total`); capture, flows and rules go on |
//!
//! A paused job restarted by a reload starts unpaused.
//!
//! With `[metrics]`, one Prometheus server serves every job's series
//! ([`crate::metrics::Board::render_jobs`]: each job's labelled `weir_job`); a job restarted by
//! a reload starts its counters again from 0 (a counter reset, as Prometheus expects).
//!
//! A job that fails before it records (an interface down, a store locked by another recorder)
//! stops every job: the service runs whole or not at all. A job that fails later is said when
//! it fails and shown `failed` by `status`; the others go on. An interface that disappears is
//! said once (the job then captures nothing more).
//!
//! With a user (`user = "NAME"`, `weir run --user NAME`; root only, checked before anything
//! starts), once every job of the file says it records, the stores are handed to the user and
//! the process becomes it, keeping CAP_NET_RAW, CAP_NET_ADMIN and CAP_IPC_LOCK so a job a
//! reload restarts can open its capture socket again ([`crate::privilege`]). A failed switch
//! stops every job (never left running as root by surprise).
//!
//! Stopping (the caller's `stop` flag, the CLI's SIGINT/SIGTERM) stops every job the way
//! `weir record` stops (capture first, then what is in the buffer is written); the caller's
//! `reload` flag (SIGHUP) reloads the config file (a job whose settings changed restarts, the
//! others go on capturing) and every job's rules.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};
use weir_control::{Commands, Server};
use weir_packet::output::error_chain;
use weir_rules::Engine;

mod web_page;

use crate::config::{ControlConfig, ServiceConfig};
use crate::record::RecordReport;
use crate::{Controls, Event, SensorError};

/// What a running job shows its caller's control socket: its live counters and its rule
/// engine ([`Controls::published`]).
#[derive(Debug, Default)]
pub struct Published {
    counters: Mutex<Option<Value>>,
    engine: Mutex<Option<Engine>>,
    recorder: Mutex<Option<Arc<weir_store::RecorderStats>>>,
    top_flows: Mutex<Option<weir_flows::TopFlowsHandle>>,
    /// How the last flow meter restart a reload asked for went (`None`: not done yet).
    flows_outcome: Mutex<Option<Result<(), String>>>,
    /// The rule counters the `top` interval starts from.
    rules_base: Mutex<Option<weir_control::top::RulesBase>>,
}

impl Published {
    /// The job's counters now (every counter as JSON, see
    /// [`stats_json`](crate::record::stats_json)).
    pub fn set_counters(&self, v: Value) {
        *self.counters.lock().unwrap_or_else(PoisonError::into_inner) = Some(v);
    }

    /// The job's rule engine (a handle sharing its rules and counters).
    pub fn set_engine(&self, e: Engine) {
        *self.engine.lock().unwrap_or_else(PoisonError::into_inner) = Some(e);
    }

    /// The job's recorder (its counters, and its rotate and pause requests).
    pub fn set_recorder(&self, r: Arc<weir_store::RecorderStats>) {
        *self.recorder.lock().unwrap_or_else(PoisonError::into_inner) = Some(r);
    }

    /// How the flow meter restart asked by a reload went (`Err`: what kept the old settings).
    pub fn set_flows_outcome(&self, r: Result<(), String>) {
        *self
            .flows_outcome
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(r);
    }

    fn take_flows_outcome(&self) -> Option<Result<(), String>> {
        self.flows_outcome
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }

    /// The job's flow meter, for `top` ([`weir_flows::LiveMeter::top_handle`]).
    pub fn set_top_flows(&self, h: weir_flows::TopFlowsHandle) {
        *self
            .top_flows
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(h);
    }

    /// The job's `top` answer: its `n` biggest open flows by `by` and its `n` rules with most
    /// hits over the last interval (`null` each when the job has no meter / no rules).
    pub fn top(&self, n: usize, by: weir_flows::TopBy) -> Value {
        let handle = self
            .top_flows
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let flows = match handle.map(|h| h.top(n, by, TOP_WAIT)) {
            None => Value::Null,
            Some(Ok(t)) => top_flows_json(&t),
            Some(Err(e)) => json!({ "error": e.to_string() }),
        };
        let rules = match self.engine() {
            None => Value::Null,
            Some(e) => {
                let mut base = self
                    .rules_base
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                weir_control::top::top_rules(&e, n, &mut base)
            }
        };
        json!({ "flows": flows, "rules": rules })
    }

    /// The recorder, once the job records.
    pub fn recorder(&self) -> Option<Arc<weir_store::RecorderStats>> {
        self.recorder
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The last counters published.
    pub fn counters(&self) -> Option<Value> {
        self.counters
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The engine, once the job has compiled its rules.
    pub fn engine(&self) -> Option<Engine> {
        self.engine
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// How long `top` waits for a flow meter's thread to rank its flows.
const TOP_WAIT: Duration = Duration::from_secs(2);

/// Most flows or rules a `top` request may ask for.
pub const TOP_MAX: usize = 1000;

/// A ranking of open flows as `top` answers it.
fn top_flows_json(t: &weir_flows::TopFlows) -> Value {
    let flow = |f: &weir_flows::TopFlow| {
        json!({
            "proto": f.key.proto,
            "src": f.key.src.to_string(),
            "src_port": f.key.src_port,
            "dst": f.key.dst.to_string(),
            "dst_port": f.key.dst_port,
            "vlan": f.key.vlan,
            "packets": f.packets,
            "bytes": f.bytes,
            "interval_packets": f.interval_packets,
            "interval_bytes": f.interval_bytes,
            "start_ns": f.start_ns,
        })
    };
    json!({
        "open": t.open,
        "interval_s": t.interval_s,
        "interval": t.interval.iter().map(flow).collect::<Vec<_>>(),
        "since_start": t.since_start.iter().map(flow).collect::<Vec<_>>(),
    })
}

/// The `top` request's `n` and `by`.
fn top_args(req: &Map<String, Value>) -> Result<(usize, weir_flows::TopBy), String> {
    let n = match req.get("n") {
        None | Some(Value::Null) => 10,
        Some(v) => match v.as_u64() {
            Some(n) if (1..=TOP_MAX as u64).contains(&n) => n as usize,
            _ => {
                return Err(format!(
                    "\"n\" must be a whole number from 1 to {TOP_MAX}, not {v}"
                ))
            }
        },
    };
    let by = match req.get("by") {
        None | Some(Value::Null) => weir_flows::TopBy::Bytes,
        Some(Value::String(s)) if s == "bytes" => weir_flows::TopBy::Bytes,
        Some(Value::String(s)) if s == "packets" => weir_flows::TopBy::Packets,
        Some(v) => return Err(format!("\"by\" must be \"bytes\" or \"packets\", not {v}")),
    };
    Ok((n, by))
}

/// The rule commands the control socket passes on to a job's engine.
pub const RULE_COMMANDS: [&str; 6] = [
    "rules.list",
    "rules.stats",
    "rules.add",
    "rules.del",
    "rules.reload",
    "rules.kernel",
];

/// A job as the service watches it.
struct Job {
    name: String,
    interface: String,
    store: PathBuf,
    rules_file: Option<PathBuf>,
    state: Mutex<(&'static str, Option<String>)>,
    started: Instant,
    published: Arc<Published>,
    /// Its Prometheus series.
    board: Arc<crate::metrics::Board>,
    stop: Arc<AtomicBool>,
    reload: &'static AtomicBool,
    /// The job said it was recording.
    ran: AtomicBool,
    /// Its interface was there at the last look.
    interface_seen: AtomicBool,
    /// Its interface disappeared while it ran (it was stopped for that).
    interface_lost: AtomicBool,
    /// The rule commands for its engine, made at the first request.
    rules_commands: Mutex<Option<Commands>>,
    /// New flow meter settings for the running job (a reload changed only `[record.flows]`).
    new_flows: Arc<Mutex<Option<crate::record::FlowsConfig>>>,
}

impl Job {
    fn set_state(&self, s: &'static str, error: Option<String>) {
        *self.state.lock().unwrap_or_else(PoisonError::into_inner) = (s, error);
    }

    fn state(&self) -> (&'static str, Option<String>) {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// How one job ended.
#[derive(Debug)]
pub struct JobEnd {
    /// The job's name.
    pub name: String,
    /// The interface it captured on.
    pub interface: String,
    /// Its store.
    pub store: PathBuf,
    /// Its report, or why it failed.
    pub result: Result<RecordReport, SensorError>,
    /// Its interface disappeared while it ran (`ip link del`): the job was stopped, its
    /// counters up to then are in `result`, and it counts as failed.
    pub interface_lost: bool,
}

/// How the service ended.
#[derive(Debug)]
pub struct ServiceReport {
    /// Every job's end, in the config's order.
    pub jobs: Vec<JobEnd>,
    /// Seconds from the stop request to the last job's end (`None`: the jobs ended by
    /// themselves).
    pub stop_s: Option<f64>,
    /// Why the switch to the configured user failed (every job was stopped), if it did.
    pub privilege_error: Option<String>,
}

/// [`ServiceReport::text`]: what `weir run` prints at its end.
#[derive(Debug, Default)]
pub struct ServiceSummary {
    /// Every job's closing lines (its flow meter's, then its record summary), and the stop time.
    pub text: String,
    /// The same lines by job (`None`: the process's own), for logs that name the job per line.
    pub parts: Vec<(Option<String>, String)>,
    /// The jobs that failed (an error, or their flow export's or capture's).
    pub failed: Vec<String>,
    /// A job lost packets in its writer or stopped on a store error.
    pub damaged: bool,
}

impl ServiceReport {
    /// The closing lines of every job, the jobs that failed, and whether one is damaged.
    pub fn text(&self) -> ServiceSummary {
        use std::fmt::Write as _;
        let mut s = ServiceSummary::default();
        for end in &self.jobs {
            let name = &end.name;
            let mut out = String::new();
            match &end.result {
                Ok(r) => {
                    if let Some(f) = &r.flows {
                        let _ = write!(out, "weir: {name}: flows:\n{}", f.report.summary());
                        if let Some(e) = &f.error {
                            let _ = writeln!(out, "weir: error: {name}: flows: {e}");
                            s.failed.push(name.clone());
                        }
                    }
                    out.push_str(&r.text(&end.store, Some((name, &end.interface))));
                    if let Some(e) = &r.capture_error {
                        let _ = writeln!(out, "weir: error: {name}: capture: {e}");
                        s.failed.push(name.clone());
                    }
                    if let Some(e) = r.analyzer_error() {
                        let _ = writeln!(out, "weir: error: {name}: {e}");
                        s.failed.push(name.clone());
                    }
                    s.damaged |= r.damaged();
                    if end.interface_lost {
                        let _ = writeln!(
                            out,
                            "weir: error: {name}: interface {} disappeared while recording: the \
                             job stopped (its counters above)",
                            end.interface
                        );
                        s.failed.push(name.clone());
                    }
                }
                Err(e) => {
                    let _ = writeln!(out, "weir: error: {name}: {}", error_chain(e));
                    s.failed.push(name.clone());
                }
            }
            s.parts.push((Some(name.clone()), out));
        }
        if let Some(e) = &self.privilege_error {
            s.parts.push((None, format!("weir: error: {e}\n")));
            s.failed.push("user".into());
        }
        if let Some(t) = self.stop_s {
            s.parts.push((
                None,
                format!("weir run: every job stopped {t:.2} s after the stop signal\n"),
            ));
        }
        s.text = s.parts.iter().map(|(_, t)| t.as_str()).collect();
        s
    }
}

/// The config reloads asked through the control socket and how they went, for the
/// `config.reload` answer.
#[derive(Default)]
struct Reloads {
    state: Mutex<ReloadState>,
    done: std::sync::Condvar,
}

#[derive(Default)]
struct ReloadState {
    /// Reloads asked (the socket's requests).
    asked: u64,
    /// Reloads done: every request up to this one has been handled.
    done: u64,
    /// What the last reload said (notices and warnings), and the jobs whose flow meter it
    /// restarts.
    said: Vec<Value>,
    flows: Vec<Arc<Job>>,
}

/// How long `config.reload` waits for the reload, then for each flow meter it restarts.
const RELOAD_WAIT: Duration = Duration::from_secs(10);

/// The jobs as the control socket sees them (replaced on a config reload).
type JobList = Arc<Mutex<Vec<Arc<Job>>>>;

/// A job's thread and what it was started with.
struct Running {
    job: Arc<Job>,
    config: crate::config::JobConfig,
    thread: Option<std::thread::JoinHandle<Result<RecordReport, SensorError>>>,
    /// Stopped by a config reload (not by the service's stop).
    retiring: bool,
}

impl Job {
    fn new(j: &crate::config::JobConfig) -> Arc<Job> {
        Arc::new(Job {
            name: j.name.clone(),
            interface: j.interface.clone(),
            store: j.record.dir.clone(),
            rules_file: j.record.rules.as_ref().map(|r| r.path.clone()),
            state: Mutex::new(("starting", None)),
            started: Instant::now(),
            published: Arc::default(),
            board: crate::metrics::Board::new(),
            stop: Arc::default(),
            // one flag per job, for the life of the process: a job's reload takes a static
            reload: Box::leak(Box::new(AtomicBool::new(false))),
            ran: AtomicBool::new(false),
            interface_seen: AtomicBool::new(true),
            interface_lost: AtomicBool::new(false),
            rules_commands: Mutex::new(None),
            new_flows: Arc::default(),
        })
    }
}

/// Starts the job `jc` on its own thread; its events go to `tx` with its name.
fn spawn(
    jc: &crate::config::JobConfig,
    tx: &mpsc::Sender<(String, Event)>,
) -> Result<Running, SensorError> {
    let job = Job::new(jc);
    let rec = jc.record.clone();
    let tx = tx.clone();
    let j = Arc::clone(&job);
    let thread = std::thread::Builder::new()
        .name(format!("job-{}", job.name))
        .spawn(move || {
            let controls = Controls {
                stop: Arc::clone(&j.stop),
                reload: j.reload,
                published: Some(Arc::clone(&j.published)),
                metrics: Some(Arc::clone(&j.board)),
                new_flows: Arc::clone(&j.new_flows),
            };
            let r = crate::record::run(&rec, &controls, &mut |e| {
                if let Event::Notice(t) = &e {
                    if t.starts_with("recording on ") {
                        j.ran.store(true, Ordering::Relaxed);
                        j.set_state("running", None);
                    }
                }
                if !matches!(e, Event::Progress(_)) {
                    let _ = tx.send((j.name.clone(), e));
                }
            });
            match &r {
                Ok(rep) => match (&rep.capture_error, &rep.summary.error) {
                    (Some(e), _) => j.set_state("failed", Some(e.to_string())),
                    (_, Some(e)) => j.set_state("failed", Some(e.to_string())),
                    _ => j.set_state("stopped", None),
                },
                Err(e) => j.set_state("failed", Some(error_chain(e))),
            }
            r
        })
        .map_err(SensorError::Thread)?;
    Ok(Running {
        job,
        config: jc.clone(),
        thread: Some(thread),
        retiring: false,
    })
}

/// Runs every job of `cfg` until `stop` is set or every job has ended. `reload` (cleared here;
/// the CLI's SIGHUP) and the control socket's `config.reload` read the config file again: jobs
/// whose settings changed restart (each stops cleanly, its store closed between blocks, then
/// starts again), new jobs start, removed jobs stop, the others go on untouched; then every
/// job's rules are reloaded. A config file that no longer checks is said and the running jobs
/// kept. Says what happens through `events`, each event with the name of its job (`None`: the
/// service itself). Fails before any job starts when the control socket cannot be served.
pub fn run(
    cfg: &ServiceConfig,
    stop: &AtomicBool,
    reload: &AtomicBool,
    events: &mut dyn FnMut(Option<&str>, Event),
) -> Result<ServiceReport, SensorError> {
    if let Some(u) = &cfg.user {
        crate::privilege::check_root(u)?;
    }
    let started = Instant::now();
    let list: JobList = Arc::default();
    let reload_config = Arc::new(AtomicBool::new(false));
    let reloads = Arc::new(Reloads::default());
    let _server = match &cfg.control {
        Some(c) => {
            let server = serve(c, &list, cfg, started, &reload_config, &reloads)?;
            events(
                None,
                Event::Notice(format!("control socket on {}", c.socket.display())),
            );
            Some(server)
        }
        None => None,
    };

    let mut metrics = match &cfg.metrics {
        Some(m) => {
            let server = start_metrics(m, &list)?;
            events(
                None,
                Event::Notice(format!("metrics on http://{}/metrics", server.local_addr())),
            );
            Some(server)
        }
        None => None,
    };
    let mut metrics_config = cfg.metrics.clone();
    let _web = web_page::start(cfg, &list, started, events)?;

    let (tx, rx) = mpsc::channel::<(String, Event)>();
    let mut running: Vec<Running> = Vec::new();
    for jc in &cfg.jobs {
        running.push(spawn(jc, &tx)?);
    }
    let publish = |running: &[Running]| {
        *list.lock().unwrap_or_else(PoisonError::into_inner) =
            running.iter().map(|r| Arc::clone(&r.job)).collect();
    };
    publish(&running);

    let mut ends: Vec<JobEnd> = Vec::new();
    let mut pending: Vec<crate::config::JobConfig> = Vec::new();
    let mut stop_at: Option<Instant> = None;
    let mut last_look = Instant::now();
    let mut stop_all = false;
    let mut to_drop = cfg.user.as_ref();
    let mut privilege_error = None;
    loop {
        if let Ok((name, e)) = rx.recv_timeout(Duration::from_millis(50)) {
            events(Some(&name), e);
        }
        let hup = reload.swap(false, Ordering::Relaxed);
        let asked = reload_config.swap(false, Ordering::Relaxed);
        let generation = reloads
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .asked;
        let mut said: Vec<Value> = Vec::new();
        let mut flows_jobs: Vec<Arc<Job>> = Vec::new();
        let mut reload_events = |job: Option<&str>, e: Event| {
            if asked {
                match &e {
                    Event::Notice(t) => said.push(json!({"job": job, "notice": t})),
                    Event::Warning(t) => said.push(json!({"job": job, "warning": t})),
                    _ => {}
                }
            }
            events(job, e)
        };
        if (hup || asked) && stop_at.is_none() {
            reload_events(
                None,
                Event::Notice(format!(
                    "{}: reading {} again",
                    if hup { "SIGHUP" } else { "config.reload" },
                    cfg.path.display()
                )),
            );
            match crate::config::load(&cfg.path) {
                Err(e) => reload_events(
                    None,
                    Event::Warning(format!(
                        "config not reloaded ({e}); the jobs go on as they were"
                    )),
                ),
                Ok(new) => {
                    if new.user != cfg.user {
                        reload_events(
                            None,
                            Event::Warning("the user changed: restart weir to apply it".into()),
                        );
                    }
                    if new.metrics != metrics_config {
                        reload_metrics(&new.metrics, &list, &mut metrics, &mut reload_events);
                        metrics_config = new.metrics.clone();
                    }
                    if new.control != cfg.control {
                        reload_events(
                            None,
                            Event::Warning(
                                "the [control] table changed: restart weir to apply it".into(),
                            ),
                        );
                    }
                    for r in running.iter_mut() {
                        let same = new.jobs.iter().find(|j| j.name == r.job.name);
                        let unchanged =
                            same.is_some_and(|j| format!("{j:?}") == format!("{:?}", r.config));
                        let flows_only = same.filter(|j| {
                            !unchanged && r.thread.is_some() && only_flows_changed(j, &r.config)
                        });
                        if let (Some(j), false) = (flows_only, r.retiring) {
                            reload_events(
                                Some(&r.job.name),
                                Event::Notice(
                                    "its [record.flows] changed: restarting the flow meter only"
                                        .into(),
                                ),
                            );
                            r.job.published.take_flows_outcome();
                            *r.job
                                .new_flows
                                .lock()
                                .unwrap_or_else(PoisonError::into_inner) = j.record.flows.clone();
                            flows_jobs.push(Arc::clone(&r.job));
                            r.config = j.clone();
                        } else if !unchanged && !r.retiring {
                            reload_events(
                                Some(&r.job.name),
                                Event::Notice(if same.is_some() {
                                    "its config changed: restarting the job".into()
                                } else {
                                    "no longer in the config: stopping the job".into()
                                }),
                            );
                            r.retiring = true;
                            r.job.set_state("stopping", None);
                            r.job.stop.store(true, Ordering::Relaxed);
                        }
                    }
                    pending = new
                        .jobs
                        .into_iter()
                        .filter(|j| {
                            !running
                                .iter()
                                .any(|r| !r.retiring && r.job.name == j.name && r.thread.is_some())
                        })
                        .collect();
                }
            }
            for r in &running {
                r.job.reload.store(true, Ordering::Relaxed);
            }
        }
        if asked {
            let mut st = reloads.state.lock().unwrap_or_else(PoisonError::into_inner);
            st.done = generation;
            st.said = std::mem::take(&mut said);
            st.flows = std::mem::take(&mut flows_jobs);
            reloads.done.notify_all();
        }

        if stop_at.is_none() && stop.load(Ordering::Relaxed) {
            stop_at = Some(Instant::now());
            pending.clear();
            for r in &running {
                let s = r.job.state().0;
                if s != "failed" && s != "stopped" {
                    r.job.set_state("stopping", None);
                }
                r.job.stop.store(true, Ordering::Relaxed);
            }
        }
        for r in running.iter_mut() {
            if !r.thread.as_ref().is_some_and(|t| t.is_finished()) {
                continue;
            }
            let Some(t) = r.thread.take() else { continue };
            let end = t.join().unwrap_or(Err(SensorError::Panicked("job")));
            while let Ok((name, e)) = rx.try_recv() {
                events(Some(&name), e);
            }
            let lost = r.job.interface_lost.load(Ordering::Relaxed);
            if lost {
                r.job.set_state(
                    "failed",
                    Some(format!("interface {} disappeared", r.job.interface)),
                );
            }
            if let (_, Some(e)) = r.job.state() {
                events(
                    Some(&r.job.name),
                    Event::Warning(format!("the job failed: {e}")),
                );
            }
            // a job that could not start at start-up stops the others: the service runs whole
            // or not at all
            let at_start = r.job.started.duration_since(started) < Duration::from_secs(1);
            if end.is_err() && !r.job.ran.load(Ordering::Relaxed) && at_start && stop_at.is_none() {
                events(
                    None,
                    Event::Warning(format!(
                        "job `{}` could not start: stopping every job",
                        r.job.name
                    )),
                );
                stop_at = Some(Instant::now());
                pending.clear();
                stop_all = true;
            }
            ends.push(JobEnd {
                name: r.job.name.clone(),
                interface: r.job.interface.clone(),
                store: r.job.store.clone(),
                result: end,
                interface_lost: lost,
            });
        }
        if let Some(u) = to_drop {
            if stop_at.is_some() {
                to_drop = None;
            } else if running.iter().all(|r| r.job.ran.load(Ordering::Relaxed)) {
                to_drop = None;
                let stores: Vec<&std::path::Path> =
                    running.iter().map(|r| r.job.store.as_path()).collect();
                match crate::privilege::drop_to(u, &stores) {
                    Ok(()) => events(
                        None,
                        Event::Notice(format!(
                            "running as {} (uid {}), keeping {}",
                            u.name,
                            u.uid,
                            crate::privilege::KEPT
                        )),
                    ),
                    Err(e) => {
                        let e = error_chain(&e);
                        events(None, Event::Warning(format!("{e}: stopping every job")));
                        privilege_error = Some(e);
                        stop_at = Some(Instant::now());
                        pending.clear();
                        stop_all = true;
                    }
                }
            }
        }
        if std::mem::take(&mut stop_all) {
            for o in &running {
                o.job.stop.store(true, Ordering::Relaxed);
            }
        }
        // the jobs a reload starts, once the ones they replace have closed their stores
        if !pending.is_empty() && running.iter().all(|r| !r.retiring || r.thread.is_none()) {
            running.retain(|r| !r.retiring);
            for jc in std::mem::take(&mut pending) {
                match spawn(&jc, &tx) {
                    Ok(r) => {
                        running.retain(|o| o.job.name != jc.name);
                        running.push(r);
                    }
                    Err(e) => events(
                        Some(&jc.name),
                        Event::Warning(format!("the job did not start: {e}")),
                    ),
                }
            }
            publish(&running);
        } else if pending.is_empty() && running.iter().any(|r| r.retiring && r.thread.is_none()) {
            running.retain(|r| !(r.retiring && r.thread.is_none()));
            publish(&running);
        }
        if last_look.elapsed() >= Duration::from_secs(1) {
            last_look = Instant::now();
            for r in running.iter().filter(|r| r.thread.is_some()) {
                let j = &r.job;
                if !interface_present(&j.interface)
                    && j.interface_seen.swap(false, Ordering::Relaxed)
                {
                    events(
                        Some(&j.name),
                        Event::Warning(format!(
                            "interface {} is gone: stopping the job (restart weir once it is \
                             back)",
                            j.interface
                        )),
                    );
                    j.interface_lost.store(true, Ordering::Relaxed);
                    j.set_state("stopping", None);
                    j.stop.store(true, Ordering::Relaxed);
                }
            }
        }
        if pending.is_empty() && running.iter().all(|r| r.thread.is_none()) {
            break;
        }
    }
    drop(tx);
    while let Ok((name, e)) = rx.try_recv() {
        events(Some(&name), e);
    }
    let stop_s = stop_at.map(|t| t.elapsed().as_secs_f64());
    Ok(ServiceReport {
        jobs: ends,
        stop_s,
        privilege_error,
    })
}

/// Serves the Prometheus series of `jobs` on `m`'s address.
fn start_metrics(
    m: &crate::config::MetricsConfig,
    jobs: &JobList,
) -> Result<weir_metrics::Server, SensorError> {
    let jobs = Arc::clone(jobs);
    Ok(weir_metrics::Server::start(
        &m.listen.to_string(),
        Arc::new(move || {
            let jobs = jobs.lock().unwrap_or_else(PoisonError::into_inner).clone();
            crate::metrics::Board::render_jobs(jobs.iter().map(|j| (j.name.as_str(), &*j.board)))
        }),
    )?)
}

/// A reload's new `[metrics]`: the listener is closed (table gone), opened (table new) or
/// moved (new address: the new one is opened first, then the old closed; one that cannot be
/// opened leaves the old one serving, with a warning). The jobs go on untouched.
fn reload_metrics(
    new: &Option<crate::config::MetricsConfig>,
    jobs: &JobList,
    server: &mut Option<weir_metrics::Server>,
    events: &mut dyn FnMut(Option<&str>, Event),
) {
    match new {
        None => {
            if let Some(old) = server.take() {
                let addr = old.local_addr();
                drop(old);
                events(
                    None,
                    Event::Notice(format!("[metrics] removed: http://{addr}/metrics closed")),
                );
            }
        }
        Some(m) => match start_metrics(m, jobs) {
            Ok(s) => {
                let addr = s.local_addr();
                if let Some(old) = server.replace(s) {
                    let was = old.local_addr();
                    drop(old);
                    events(
                        None,
                        Event::Notice(format!(
                            "[metrics] changed: metrics moved from http://{was}/metrics to \
                             http://{addr}/metrics"
                        )),
                    );
                } else {
                    events(
                        None,
                        Event::Notice(format!("[metrics] added: metrics on http://{addr}/metrics")),
                    );
                }
            }
            Err(e) => events(
                None,
                Event::Warning(format!(
                    "[metrics] not changed ({}){}",
                    error_chain(&e),
                    match server {
                        Some(s) => format!(": metrics stay on http://{}/metrics", s.local_addr()),
                        None => ": no metrics served".into(),
                    }
                )),
            ),
        },
    }
}

/// Whether `new` differs from `old` in its flow meter's settings only, both having a meter:
/// the job restarts its meter, not capture and recording.
fn only_flows_changed(new: &crate::config::JobConfig, old: &crate::config::JobConfig) -> bool {
    if new.record.flows.is_none() || old.record.flows.is_none() {
        return false;
    }
    let (mut a, mut b) = (new.clone(), old.clone());
    a.record.flows = None;
    b.record.flows = None;
    format!("{a:?}") == format!("{b:?}")
}

/// Whether the interface `name` exists now.
fn interface_present(name: &str) -> bool {
    std::path::Path::new("/sys/class/net").join(name).exists()
}

/// Serves the control socket of `c` for `jobs`.
fn serve(
    c: &ControlConfig,
    jobs: &JobList,
    cfg: &ServiceConfig,
    started: Instant,
    reload_config: &Arc<AtomicBool>,
    reloads: &Arc<Reloads>,
) -> Result<Server, SensorError> {
    let mut commands = Commands::new();
    {
        let jobs = Arc::clone(jobs);
        let config = cfg.path.display().to_string();
        commands.add("status", move |_| {
            let jobs = jobs.lock().unwrap_or_else(PoisonError::into_inner).clone();
            let list: Vec<Value> = jobs
                .iter()
                .map(|j| {
                    let (state, error) = j.state();
                    json!({
                        "name": j.name,
                        "kind": "record",
                        "interface": j.interface,
                        "store": j.store.display().to_string(),
                        "rules": j.rules_file.as_ref().map(|p| p.display().to_string()),
                        "state": state,
                        "paused": j.published.recorder().is_some_and(|r| r.pause.load(Ordering::Relaxed)),
                        "index_lag_s": j.published.recorder().filter(|r| r.indexing.load(Ordering::Relaxed)).map(|r| r.index_lag_s(weir_flows::wall_clock_ns())),
                        "interface_present": interface_present(&j.interface),
                        "error": error,
                        "uptime_s": j.started.elapsed().as_secs_f64(),
                    })
                })
                .collect();
            Ok(obj(json!({
                "pid": std::process::id(),
                "config": config,
                "uptime_s": started.elapsed().as_secs_f64(),
                "jobs": list,
            })))
        });
    }
    {
        let flag = Arc::clone(reload_config);
        let reloads = Arc::clone(reloads);
        commands.add("config.reload", move |_| Ok(config_reload(&flag, &reloads)));
    }
    {
        let jobs = Arc::clone(jobs);
        commands.add("counters", move |_| {
            let jobs = jobs.lock().unwrap_or_else(PoisonError::into_inner).clone();
            let mut m = Map::new();
            for j in &jobs {
                m.insert(
                    j.name.clone(),
                    j.published.counters().unwrap_or(Value::Null),
                );
            }
            Ok(obj(json!({ "jobs": m })))
        });
    }
    {
        let jobs = Arc::clone(jobs);
        commands.add("top", move |req| {
            let (n, by) = top_args(req)?;
            let jobs = jobs.lock().unwrap_or_else(PoisonError::into_inner).clone();
            let chosen: Vec<&Arc<Job>> = match req.get("job") {
                None => jobs.iter().collect(),
                Some(_) => vec![named_job(&jobs, req, "top")?],
            };
            let mut m = Map::new();
            for j in chosen {
                m.insert(j.name.clone(), j.published.top(n, by));
            }
            Ok(obj(json!({ "n": n, "by": if by == weir_flows::TopBy::Bytes { "bytes" } else { "packets" }, "jobs": m })))
        });
    }
    {
        let jobs = Arc::clone(jobs);
        commands.add("rotate", move |req| {
            let jobs = jobs.lock().unwrap_or_else(PoisonError::into_inner).clone();
            rotate(&jobs, req)
        });
    }
    for (name, on) in [("pause", true), ("resume", false)] {
        let jobs = Arc::clone(jobs);
        commands.add(name, move |req| {
            let jobs = jobs.lock().unwrap_or_else(PoisonError::into_inner).clone();
            let job = named_job(&jobs, req, name)?;
            let r = job
                .published
                .recorder()
                .ok_or_else(|| format!("job `{}` is not recording yet", job.name))?;
            let was = r.pause.swap(on, Ordering::AcqRel);
            Ok(obj(json!({
                "job": job.name,
                "paused": on,
                "changed": was != on,
                "paused_packets": r.paused.load(Ordering::Relaxed),
            })))
        });
    }
    for name in RULE_COMMANDS {
        let jobs = Arc::clone(jobs);
        commands.add(name, move |req| {
            let jobs = jobs.lock().unwrap_or_else(PoisonError::into_inner).clone();
            rules_request(&jobs, req)
        });
    }
    let server = Server::serve(&c.socket, commands).map_err(|source| SensorError::Control {
        path: c.socket.clone(),
        source,
    })?;
    if let Some((_, gid)) = &c.group {
        std::os::unix::fs::chown(&c.socket, None, Some(*gid)).map_err(|e| {
            SensorError::Control {
                path: c.socket.clone(),
                source: weir_control::ControlError::Io {
                    path: c.socket.clone(),
                    source: e,
                },
            }
        })?;
    }
    Ok(server)
}

/// `config.reload`: asks the service loop to read the config file again and answers once it
/// has, and once each flow meter the reload restarts has (or has kept its old settings):
/// `queued`, `done` (false: not within [`RELOAD_WAIT`]), `said` (the reload's notices and
/// warnings, each `{job, notice|warning}`), `flows` (job → `"restarted"` or why not),
/// `warnings` (how many were said).
fn config_reload(flag: &AtomicBool, reloads: &Reloads) -> Map<String, Value> {
    let deadline = Instant::now() + RELOAD_WAIT;
    let mut st = reloads.state.lock().unwrap_or_else(PoisonError::into_inner);
    st.asked += 1;
    let mine = st.asked;
    flag.store(true, Ordering::Relaxed);
    while st.done < mine {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return obj(json!({"queued": true, "done": false}));
        }
        st = reloads
            .done
            .wait_timeout(st, left)
            .unwrap_or_else(PoisonError::into_inner)
            .0;
    }
    let mut said = st.said.clone();
    let jobs = st.flows.clone();
    drop(st);
    let mut flows = Map::new();
    for j in jobs {
        let outcome = loop {
            if let Some(o) = j.published.take_flows_outcome() {
                break Some(o);
            }
            if Instant::now() >= deadline || j.state().0 != "running" {
                break None;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let v = match outcome {
            Some(Ok(())) => json!("restarted"),
            Some(Err(e)) => {
                said.push(json!({"job": j.name, "warning": e}));
                json!(e)
            }
            None => json!("not done yet (the job is busy or stopping)"),
        };
        flows.insert(j.name.clone(), v);
    }
    let warnings = said.iter().filter(|v| v.get("warning").is_some()).count();
    obj(json!({
        "queued": true,
        "done": true,
        "said": said,
        "flows": flows,
        "warnings": warnings,
    }))
}

/// The job a request names with `"job"` (required).
fn named_job<'a>(
    jobs: &'a [Arc<Job>],
    req: &Map<String, Value>,
    cmd: &str,
) -> Result<&'a Arc<Job>, String> {
    let names = || {
        jobs.iter()
            .map(|j| j.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    match req.get("job") {
        Some(Value::String(n)) => jobs
            .iter()
            .find(|j| &j.name == n)
            .ok_or_else(|| format!("no job `{n}` (jobs: {})", names())),
        Some(v) => Err(format!("\"job\" must be a job's name, not {v}")),
        None => Err(format!("{cmd} needs \"job\": one of {}", names())),
    }
}

/// How long `rotate` waits for the recorders to close their segments.
const ROTATE_WAIT: Duration = Duration::from_secs(5);

/// `rotate`: the named job's recorder (every job's without `"job"`) closes its segment at
/// the next block boundary; answered once they all have, with the segments each has started.
fn rotate(jobs: &[Arc<Job>], req: &Map<String, Value>) -> Result<Map<String, Value>, String> {
    let chosen: Vec<&Arc<Job>> = match req.get("job") {
        None => jobs.iter().collect(),
        Some(_) => vec![named_job(jobs, req, "rotate")?],
    };
    let mut asked = Vec::new();
    for j in chosen {
        let r = j
            .published
            .recorder()
            .ok_or_else(|| format!("job `{}` is not recording yet", j.name))?;
        r.rotate.store(true, Ordering::Release);
        asked.push((j, r));
    }
    let t = Instant::now();
    while asked.iter().any(|(_, r)| r.rotate.load(Ordering::Acquire)) {
        if t.elapsed() > ROTATE_WAIT {
            let late: Vec<&str> = asked
                .iter()
                .filter(|(_, r)| r.rotate.load(Ordering::Acquire))
                .map(|(j, _)| j.name.as_str())
                .collect();
            return Err(format!(
                "the recorder of {} did not rotate within {} s (stopped?)",
                late.join(", "),
                ROTATE_WAIT.as_secs()
            ));
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let rotated: Vec<Value> = asked
        .iter()
        .map(
            |(j, r)| json!({"job": j.name, "segments_started": r.segments.load(Ordering::Relaxed)}),
        )
        .collect();
    Ok(obj(json!({ "rotated": rotated })))
}

/// A rule command for the job the request names (or the only job with rules), answered by
/// that job's engine.
fn rules_request(
    jobs: &[Arc<Job>],
    req: &Map<String, Value>,
) -> Result<Map<String, Value>, String> {
    let with_rules: Vec<&Arc<Job>> = jobs.iter().filter(|j| j.rules_file.is_some()).collect();
    let names = || {
        with_rules
            .iter()
            .map(|j| j.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let job = match req.get("job") {
        Some(Value::String(n)) => jobs
            .iter()
            .find(|j| &j.name == n)
            .ok_or_else(|| format!("no job `{n}` (jobs with rules: {})", names()))?,
        Some(v) => return Err(format!("\"job\" must be a job's name, not {v}")),
        None => match with_rules.as_slice() {
            [one] => one,
            [] => return Err("no job of this process has rules".into()),
            _ => {
                return Err(format!(
                    "several jobs have rules ({}): name one with \"job\"",
                    names()
                ))
            }
        },
    };
    let Some(engine) = job.published.engine() else {
        return Err(match job.rules_file {
            None => format!("job `{}` has no rules", job.name),
            Some(_) => format!("job `{}` has not started its rules yet", job.name),
        });
    };
    let mut req = req.clone();
    req.remove("job");
    let line = Value::Object(req).to_string();
    let mut slot = job
        .rules_commands
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    let commands = slot.get_or_insert_with(|| {
        let mut c = Commands::new();
        weir_control::rules::register(&mut c, engine, job.rules_file.clone());
        c
    });
    match commands.answer(line.as_bytes()) {
        Value::Object(mut m) => {
            if m.remove("ok") == Some(Value::Bool(true)) {
                m.insert("job".into(), json!(job.name));
                Ok(m)
            } else {
                Err(m
                    .get("error")
                    .and_then(Value::as_str)
                    .unwrap_or("the rules refused the request")
                    .to_string())
            }
        }
        other => Err(format!("bad reply from the rules: {other}")),
    }
}

fn obj(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}
