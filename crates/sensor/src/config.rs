//! The configuration file of `weir run`: a TOML file naming the jobs one process runs (one
//! `[[record]]` job per interface, each with its store, its flow meter and its rules; the
//! `[[stream]]`, `[[http]]` and `[[voip]]` jobs reading a record job's capture) and the
//! control socket. See `packaging/weir.example.toml` for every key, documented.
//!
//! The file is checked whole before anything starts ([`load`]): unknown keys are refused, every
//! number is range-checked (negative, NaN, infinite and huge values), the interfaces must
//! exist, each store's parent directory must exist and no two jobs may share a store, an
//! interface or a name, the rule files must parse, the flow outputs must be valid. An error
//! names the file, the line and column, and the key (`weir.toml:7:15: record[0].segment_mib:
//! ...`), followed by the line itself. Relative paths are taken from the config file's
//! directory.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;
use weir_export::{
    check_topic, KafkaCompression, KafkaFormat, KafkaOutput, NetflowFormat, NetflowOutput, Outputs,
    ParquetOutput, Target, DEFAULT_FLOWS_TOPIC,
};
use weir_store::{Format, Sizes};

mod analyzers;
mod streams;
mod web;

use crate::live::SourceConfig;
use crate::record::{FlowsConfig, RecordConfig};
use crate::rules::RulesConfig;

/// A config file that cannot run: where, which key, why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.render())]
pub struct ConfigError {
    /// The config file.
    pub path: PathBuf,
    /// 1-based line and column of the offending value (none when the file could not be read
    /// or the error is about the whole file).
    pub at: Option<(usize, usize)>,
    /// The key, as a path (`record[1].flows.idle_timeout_s`), when one is to blame.
    pub key: Option<String>,
    /// What is wrong.
    pub message: String,
    /// The offending line's text.
    pub line: Option<String>,
}

impl ConfigError {
    fn render(&self) -> String {
        let mut s = self.path.display().to_string();
        if let Some((l, c)) = self.at {
            s.push_str(&format!(":{l}:{c}"));
        }
        s.push_str(": ");
        if let Some(k) = &self.key {
            s.push_str(k);
            s.push_str(": ");
        }
        s.push_str(&self.message);
        if let (Some((l, _)), Some(text)) = (self.at, &self.line) {
            s.push_str(&format!("\n  {l} | {text}"));
        }
        s
    }
}

/// The control socket of a service.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ControlConfig {
    /// The socket's path (mode 0660).
    pub socket: PathBuf,
    /// The group that owns the socket: its name and id (`None`: the process's group).
    pub group: Option<(String, u32)>,
}

/// The Prometheus metrics of a service (`[metrics]`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MetricsConfig {
    /// The address to serve `GET /metrics` on (`127.0.0.1:9637` by default).
    pub listen: std::net::SocketAddr,
}

/// One job of a service.
#[derive(Clone, Debug)]
pub struct JobConfig {
    /// Its name (unique in the file; the interface by default).
    pub name: String,
    /// The interface it captures on.
    pub interface: String,
    /// The record job (with its flows and rules).
    pub record: RecordConfig,
}

/// A whole config file, checked.
#[derive(Clone, Debug)]
pub struct ServiceConfig {
    /// The file it came from.
    pub path: PathBuf,
    /// The control socket, if any.
    pub control: Option<ControlConfig>,
    /// The metrics server, if any.
    pub metrics: Option<MetricsConfig>,
    /// The jobs, in the file's order.
    pub jobs: Vec<JobConfig>,
    /// The read-only web page's address (`[web] listen`), if any.
    pub web: Option<std::net::SocketAddr>,
    /// The user to become once every job records (`user = "NAME"`; see [`crate::privilege`]).
    pub user: Option<crate::privilege::RunAs>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    user: Option<Spanned<String>>,
    control: Option<Spanned<RawControl>>,
    metrics: Option<Spanned<RawMetrics>>,
    #[serde(default)]
    record: Vec<Spanned<RawRecord>>,
    #[serde(default)]
    stream: Vec<Spanned<streams::RawStream>>,
    #[serde(default)]
    http: Vec<Spanned<analyzers::RawHttp>>,
    #[serde(default)]
    voip: Vec<Spanned<analyzers::RawVoip>>,
    web: Option<web::RawWeb>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawControl {
    socket: Spanned<String>,
    group: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMetrics {
    listen: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRecord {
    name: Option<Spanned<String>>,
    interface: Spanned<String>,
    store: Spanned<String>,
    format: Option<Spanned<String>>,
    segment_mib: Option<Spanned<i64>>,
    write_mib: Option<Spanned<i64>>,
    max_mib: Option<Spanned<i64>>,
    max_age_s: Option<Spanned<f64>>,
    index: Option<bool>,
    index_chunk_kib: Option<Spanned<i64>>,
    buffer_mib: Option<Spanned<i64>>,
    threads: Option<Spanned<i64>>,
    snaplen: Option<Spanned<i64>>,
    promiscuous: Option<bool>,
    hw_timestamps: Option<bool>,
    filter: Option<Spanned<String>>,
    rules: Option<Spanned<String>>,
    kernel_rules: Option<bool>,
    stats_json: Option<Spanned<String>>,
    flows: Option<Spanned<RawFlows>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFlows {
    idle_timeout_s: Option<Spanned<f64>>,
    active_timeout_s: Option<Spanned<f64>>,
    export: Option<Spanned<String>>,
    export_format: Option<Spanned<String>>,
    json: Option<Spanned<String>>,
    csv: Option<Spanned<String>>,
    parquet: Option<Spanned<String>>,
    parquet_interval_s: Option<Spanned<f64>>,
    kafka: Option<Spanned<RawKafka>>,
}

/// `[record.flows.kafka]`: the flow records to Kafka (see weir_export::KafkaOutput).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawKafka {
    brokers: Spanned<String>,
    topic: Option<Spanned<String>>,
    format: Option<Spanned<String>>,
    compression: Option<Spanned<String>>,
    sensor: Option<Spanned<String>>,
    records_per_message: Option<Spanned<i64>>,
}

/// Reads and checks the config file `path` (see the module documentation).
pub fn load(path: &Path) -> Result<ServiceConfig, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
        path: path.to_path_buf(),
        at: None,
        key: None,
        message: format!("cannot read the config file: {e}"),
        line: None,
    })?;
    parse(path, &text)
}

/// Checks the config `text` read from `path` (relative paths in it are taken from `path`'s
/// directory; interfaces, directories and rule files are looked up on this machine).
pub fn parse(path: &Path, text: &str) -> Result<ServiceConfig, ConfigError> {
    let cx = Cx { path, text };
    let raw: RawFile = toml::from_str(text).map_err(|e| {
        let at = e.span().map(|s| s.start);
        cx.err(at, None, e.message().trim_end().to_string())
    })?;
    cx.build(raw)
}

/// The file being checked: its path (for messages and relative paths) and its text (spans to
/// lines and columns).
struct Cx<'a> {
    path: &'a Path,
    text: &'a str,
}

impl Cx<'_> {
    fn err(
        &self,
        at: Option<usize>,
        key: Option<String>,
        message: impl fmt::Display,
    ) -> ConfigError {
        let at = at.map(|o| self.position(o));
        ConfigError {
            path: self.path.to_path_buf(),
            line: at.and_then(|(l, _)| self.text.lines().nth(l - 1).map(str::to_string)),
            at,
            key,
            message: message.to_string(),
        }
    }

    /// 1-based line and column (in characters) of byte `offset`.
    fn position(&self, offset: usize) -> (usize, usize) {
        let offset = offset.min(self.text.len());
        let before = self.text.get(..offset).unwrap_or(self.text);
        let line = before.matches('\n').count() + 1;
        let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
        (line, col)
    }

    fn at<T>(&self, v: &Spanned<T>, key: &str, message: impl fmt::Display) -> ConfigError {
        self.err(Some(v.span().start), Some(key.to_string()), message)
    }

    /// A path of the file, taken from the config file's directory when relative.
    fn path_of(&self, p: &str) -> PathBuf {
        let p = Path::new(p);
        if p.is_absolute() {
            p.to_path_buf()
        } else {
            self.path
                .parent()
                .filter(|d| !d.as_os_str().is_empty())
                .unwrap_or(Path::new("."))
                .join(p)
        }
    }

    /// An integer in `lo..=hi`.
    fn int(&self, v: &Spanned<i64>, key: &str, lo: i64, hi: i64) -> Result<u64, ConfigError> {
        let n = *v.get_ref();
        if n < lo || n > hi {
            return Err(self.at(v, key, format!("must be between {lo} and {hi} (got {n})")));
        }
        Ok(n as u64)
    }

    /// Seconds: finite, in `lo..=hi`.
    fn secs(&self, v: &Spanned<f64>, key: &str, lo: f64, hi: f64) -> Result<f64, ConfigError> {
        let s = *v.get_ref();
        if !s.is_finite() || s < lo || s > hi {
            return Err(self.at(
                v,
                key,
                format!("must be a number of seconds from {lo} to {hi} (got {s})"),
            ));
        }
        Ok(s)
    }

    /// Seconds as [`secs`](Self::secs) checks them, in ns ([`weir_packet::value::ns`]: rounded).
    fn secs_ns(&self, v: &Spanned<f64>, key: &str, lo: f64, hi: f64) -> Result<u64, ConfigError> {
        self.secs(v, key, lo, hi).map(weir_packet::value::ns)
    }

    /// A path whose parent directory exists.
    fn out_path(&self, v: &Spanned<String>, key: &str) -> Result<PathBuf, ConfigError> {
        if v.get_ref().is_empty() {
            return Err(self.at(v, key, "is empty"));
        }
        let p = self.path_of(v.get_ref());
        let parent = p
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        if !parent.is_dir() {
            return Err(self.at(
                v,
                key,
                format!(
                    "the directory {} does not exist (create it first)",
                    parent.display()
                ),
            ));
        }
        Ok(p)
    }

    fn build(&self, raw: RawFile) -> Result<ServiceConfig, ConfigError> {
        let control = raw.control.as_ref().map(|c| self.control(c)).transpose()?;
        let metrics = raw.metrics.as_ref().map(|m| self.metrics(m)).transpose()?;
        if raw.record.is_empty() {
            return Err(self.err(
                None,
                None,
                "no job: add a [[record]] table (see packaging/weir.example.toml)",
            ));
        }
        let mut jobs: Vec<JobConfig> = Vec::new();
        let mut names = BTreeMap::new();
        let mut interfaces = BTreeMap::new();
        let mut stores: BTreeMap<PathBuf, String> = BTreeMap::new();
        let mut files_seen: BTreeMap<PathBuf, String> = BTreeMap::new();
        if let (Some(c), Some(raw)) = (&control, &raw.control) {
            files_seen.insert(
                canonical_store(&c.socket),
                format!(
                    "control.socket (line {})",
                    self.position(raw.get_ref().socket.span().start).0
                ),
            );
        }
        for (i, r) in raw.record.iter().enumerate() {
            let key = format!("record[{i}]");
            let job = self.record(r.get_ref(), &key)?;
            let rr = r.get_ref();
            let name_at = rr.name.as_ref().map_or(rr.interface.span(), |n| n.span());
            if let Some(other) = names.insert(job.name.clone(), i) {
                return Err(self.err(
                    Some(name_at.start),
                    Some(format!("{key}.name")),
                    format!(
                        "job name `{}` is also record[{other}]'s (name the jobs apart)",
                        job.name
                    ),
                ));
            }
            let canon = canonical_store(&job.record.dir);
            if let Some(other) = stores.get(&canon) {
                return Err(self.at(
                    &rr.store,
                    &format!("{key}.store"),
                    format!(
                        "store {} is also job `{other}`'s: each job needs its own store",
                        job.record.dir.display()
                    ),
                ));
            }
            stores.insert(canon, job.name.clone());
            if let Some(other) = interfaces.insert(job.interface.clone(), i) {
                return Err(self.at(
                    &rr.interface,
                    &format!("{key}.interface"),
                    format!(
                        "interface {} is also record[{other}]'s: one record job per interface",
                        job.interface
                    ),
                ));
            }
            let flows = rr.flows.as_ref().map(|f| f.get_ref());
            let files = [
                (rr.stats_json.as_ref(), "stats_json"),
                (flows.and_then(|f| f.json.as_ref()), "flows.json"),
                (flows.and_then(|f| f.csv.as_ref()), "flows.csv"),
                (flows.and_then(|f| f.parquet.as_ref()), "flows.parquet"),
            ];
            for (v, name) in files {
                let Some(v) = v else { continue };
                let p = canonical_store(&self.path_of(v.get_ref()));
                let this = format!("{key}.{name}");
                if let Some(other) = files_seen.insert(p.clone(), this.clone()) {
                    return Err(self.at(
                        v,
                        &this,
                        format!(
                            "{} is also {other}: give each output its own file",
                            p.display()
                        ),
                    ));
                }
            }
            jobs.push(job);
        }
        self.streams(&raw.stream, &mut jobs)?;
        self.http_jobs(&raw.http, &mut jobs, &mut files_seen)?;
        self.voip_jobs(&raw.voip, &mut jobs, &mut files_seen)?;
        let web = raw.web.as_ref().map(|w| self.web(w)).transpose()?;
        let user = raw
            .user
            .as_ref()
            .map(|u| crate::privilege::lookup(u.get_ref()).map_err(|e| self.at(u, "user", e)))
            .transpose()?;
        Ok(ServiceConfig {
            user,
            path: self.path.to_path_buf(),
            control,
            metrics,
            jobs,
            web,
        })
    }

    fn control(&self, c: &Spanned<RawControl>) -> Result<ControlConfig, ConfigError> {
        let c = c.get_ref();
        let socket = self.out_path(&c.socket, "control.socket")?;
        let group = match &c.group {
            None => None,
            Some(g) => {
                let gid = group_id(g.get_ref()).ok_or_else(|| {
                    self.at(
                        g,
                        "control.group",
                        format!("no group `{}` on this machine (/etc/group)", g.get_ref()),
                    )
                })?;
                Some((g.get_ref().clone(), gid))
            }
        };
        Ok(ControlConfig { socket, group })
    }

    fn metrics(&self, m: &Spanned<RawMetrics>) -> Result<MetricsConfig, ConfigError> {
        let listen = match &m.get_ref().listen {
            None => weir_metrics::DEFAULT_ADDR.parse().ok(),
            Some(v) => Some(
                weir_metrics::http::parse_addr(v.get_ref())
                    .map_err(|e| self.at(v, "metrics.listen", e))?,
            ),
        };
        let listen = listen.ok_or_else(|| self.at(m, "metrics", "no listen address"))?;
        Ok(MetricsConfig { listen })
    }

    fn record(&self, r: &RawRecord, key: &str) -> Result<JobConfig, ConfigError> {
        let k = |f: &str| format!("{key}.{f}");
        let iface = r.interface.get_ref();
        if iface.is_empty()
            || iface.contains('/')
            || iface == "."
            || iface == ".."
            || !Path::new("/sys/class/net").join(iface).exists()
        {
            return Err(self.at(
                &r.interface,
                &k("interface"),
                format!("no interface `{iface}` on this machine (see `ip link`)"),
            ));
        }
        let flags = std::fs::read_to_string(Path::new("/sys/class/net").join(iface).join("flags"));
        let up = flags
            .ok()
            .and_then(|f| u32::from_str_radix(f.trim().trim_start_matches("0x"), 16).ok())
            .is_none_or(|f| f & 1 != 0);
        if !up {
            return Err(self.at(
                &r.interface,
                &k("interface"),
                format!("interface {iface} is down (bring it up with `ip link set {iface} up`)"),
            ));
        }
        let name = match &r.name {
            Some(n) if n.get_ref().is_empty() || n.get_ref().chars().any(char::is_control) => {
                return Err(self.at(n, &k("name"), "must be a non-empty name"));
            }
            Some(n) => n.get_ref().clone(),
            None => iface.clone(),
        };
        let dir = self.out_path(&r.store, &k("store"))?;
        if dir.exists() && !dir.is_dir() {
            return Err(self.at(
                &r.store,
                &k("store"),
                format!("{} exists and is not a directory", dir.display()),
            ));
        }
        let format = match &r.format {
            None => Format::Pcapng,
            Some(f) => match f.get_ref().as_str() {
                "pcapng" => Format::Pcapng,
                "pcap" => Format::Pcap,
                other => {
                    return Err(self.at(
                        f,
                        &k("format"),
                        format!("`{other}` is no segment format (pcapng or pcap)"),
                    ))
                }
            },
        };
        let segment_mib = match &r.segment_mib {
            Some(v) => self.int(v, &k("segment_mib"), 1, 1 << 20)?,
            None => 1024,
        };
        let write_mib = match &r.write_mib {
            Some(v) => {
                let w = self.int(
                    v,
                    &k("write_mib"),
                    1,
                    weir_store::sizes::MAX_WRITE_MIB as i64,
                )?;
                if w > segment_mib {
                    return Err(self.at(
                        v,
                        &k("write_mib"),
                        format!("{w} is larger than a segment (segment_mib = {segment_mib})"),
                    ));
                }
                w
            }
            None => 4.min(segment_mib),
        };
        let max_mib = match &r.max_mib {
            Some(v) => {
                let m = self.int(v, &k("max_mib"), 1, 1 << 40)?;
                if m < segment_mib {
                    return Err(self.at(
                        v,
                        &k("max_mib"),
                        format!(
                            "{m} is smaller than one segment (segment_mib = {segment_mib}): \
                             retention would delete the segment being written"
                        ),
                    ));
                }
                Some(m)
            }
            None => None,
        };
        let max_age_ns = r
            .max_age_s
            .as_ref()
            .map(|v| self.secs_ns(v, &k("max_age_s"), 1.0, 1e9))
            .transpose()?;
        let index_chunk_kib = match (&r.index, &r.index_chunk_kib) {
            (Some(false), Some(v)) => {
                return Err(self.at(
                    v,
                    &k("index_chunk_kib"),
                    "is for an indexed store, and index = false",
                ))
            }
            (Some(false), None) => None,
            (_, Some(v)) => Some(self.int(v, &k("index_chunk_kib"), 4, 1 << 20)? as u32),
            (_, None) => Some(weir_index::DEFAULT_CHUNK / 1024),
        };
        let sizes = Sizes {
            segment_mib,
            write_mib,
            max_mib,
            index_chunk_kib,
        };
        sizes
            .check(&dir)
            .map_err(|e| self.at(&r.store, &k("store"), e))?;
        let buffer_mib = match &r.buffer_mib {
            Some(v) => {
                let b = self.int(v, &k("buffer_mib"), 1, 1 << 20)?;
                if !b.is_power_of_two() {
                    return Err(self.at(v, &k("buffer_mib"), format!("{b} is not a power of two")));
                }
                b
            }
            None => 512,
        };
        let mut pipeline = weir_capture::PipelineConfig::new(vec![iface.clone()]);
        pipeline.buffer_bytes = (buffer_mib as usize) << 20;
        if let Some(v) = &r.threads {
            pipeline.threads = self.int(v, &k("threads"), 1, 256)? as usize;
        }
        if let Some(v) = &r.snaplen {
            pipeline.snaplen = self.int(v, &k("snaplen"), 64, 262_144)? as u32;
        }
        pipeline.promiscuous = r.promiscuous.unwrap_or(true);
        pipeline.hw_timestamps = r.hw_timestamps.unwrap_or(true);
        pipeline.kernel_rules = r.kernel_rules.unwrap_or(true);
        if let Some(f) = &r.filter {
            if let Err(e) = weir_filter::Filter::compile(
                f.get_ref(),
                weir_capture::link_type(iface).unwrap_or(weir_packet::LinkType::ETHERNET),
                pipeline.snaplen,
            ) {
                return Err(self.at(f, &k("filter"), e));
            }
            pipeline.filter = f.get_ref().clone();
        }
        let rules = match &r.rules {
            None => None,
            Some(v) => {
                let p = self.path_of(v.get_ref());
                crate::rules::load(&p).map_err(|e| self.at(v, &k("rules"), e))?;
                Some(RulesConfig {
                    path: p,
                    control: None,
                })
            }
        };
        let stats_json = r
            .stats_json
            .as_ref()
            .map(|v| self.out_path(v, &k("stats_json")))
            .transpose()?;
        let flows = r
            .flows
            .as_ref()
            .map(|f| self.flows(f.get_ref(), &k("flows"), rules.is_some(), &name))
            .transpose()?;
        Ok(JobConfig {
            name,
            interface: iface.clone(),
            record: RecordConfig {
                source: SourceConfig::Live(pipeline),
                dir,
                format,
                sizes,
                max_age_ns,
                duration: None::<Duration>,
                stats_json,
                flows,
                http: None,
                voip: None,
                rules,
                streams: Vec::new(),
            },
        })
    }

    fn flows(
        &self,
        f: &RawFlows,
        key: &str,
        tags: bool,
        job: &str,
    ) -> Result<FlowsConfig, ConfigError> {
        let k = |n: &str| format!("{key}.{n}");
        let mut meter = weir_flows::Config::default();
        if let Some(v) = &f.idle_timeout_s {
            meter.idle_timeout_ns = self.secs_ns(v, &k("idle_timeout_s"), 1e-3, 1e6)?;
        }
        if let Some(v) = &f.active_timeout_s {
            meter.active_timeout_ns = self.secs_ns(v, &k("active_timeout_s"), 1e-3, 1e6)?;
        }
        let format = match &f.export_format {
            None => NetflowFormat::Ipfix,
            Some(v) => {
                if f.export.is_none() {
                    return Err(self.at(v, &k("export_format"), "give `export` too"));
                }
                match v.get_ref().as_str() {
                    "v5" => NetflowFormat::V5,
                    "v9" => NetflowFormat::V9,
                    "ipfix" => NetflowFormat::Ipfix,
                    other => {
                        return Err(self.at(
                            v,
                            &k("export_format"),
                            format!("`{other}` is no export format (v5, v9 or ipfix)"),
                        ))
                    }
                }
            }
        };
        let netflow = match &f.export {
            None => None,
            Some(v) => {
                let t = v.get_ref();
                let target = Target::from_str(t).map_err(|e| self.at(v, &k("export"), e))?;
                Some(NetflowOutput {
                    target,
                    label: t.clone(),
                    format,
                    biflow: false,
                    ts_nanos: false,
                })
            }
        };
        let json = f
            .json
            .as_ref()
            .map(|v| self.out_path(v, &k("json")))
            .transpose()?;
        let csv = f
            .csv
            .as_ref()
            .map(|v| self.out_path(v, &k("csv")))
            .transpose()?;
        let kafka = f
            .kafka
            .as_ref()
            .map(|v| self.kafka(v.get_ref(), &k("kafka")))
            .transpose()?;
        let parquet = self.parquet(f, &k, job)?;
        Ok(FlowsConfig {
            meter,
            outputs: Outputs {
                netflow,
                csv,
                json,
                kafka,
                parquet,
                tags,
            },
        })
    }

    fn kafka(&self, r: &RawKafka, key: &str) -> Result<KafkaOutput, ConfigError> {
        let k = |n: &str| format!("{key}.{n}");
        let topic = r
            .topic
            .as_ref()
            .map_or(DEFAULT_FLOWS_TOPIC, |t| t.get_ref());
        let mut out = KafkaOutput::new(r.brokers.get_ref(), topic);
        if let Some(v) = &r.format {
            out.format = match v.get_ref().as_str() {
                "json" => KafkaFormat::Json,
                "protobuf" => KafkaFormat::Protobuf,
                o => {
                    return Err(self.at(
                        v,
                        &k("format"),
                        format!("`{o}` is no Kafka format (json or protobuf)"),
                    ))
                }
            };
        }
        if let Some(v) = &r.compression {
            out.compression = match v.get_ref().as_str() {
                "zstd" => KafkaCompression::Zstd,
                "lz4" => KafkaCompression::Lz4,
                "none" => KafkaCompression::None,
                o => {
                    return Err(self.at(
                        v,
                        &k("compression"),
                        format!("`{o}` is no compression (zstd, lz4 or none)"),
                    ))
                }
            };
        }
        if let Some(v) = &r.sensor {
            out.sensor = v.get_ref().clone();
        }
        out.records_per_message = out.format.default_records_per_message();
        if let Some(v) = &r.records_per_message {
            let max = weir_export::MAX_RECORDS_PER_MESSAGE;
            out.records_per_message = u32::try_from(*v.get_ref())
                .ok()
                .filter(|n| (1..=max).contains(n))
                .ok_or_else(|| {
                    self.at(
                        v,
                        &k("records_per_message"),
                        format!("{} is out of range: 1 to {max}", v.get_ref()),
                    )
                })?;
        }
        if let Err(e) = out.check() {
            let at = match &r.topic {
                Some(t) if check_topic(t.get_ref()).is_err() => t,
                _ => &r.brokers,
            };
            let name = if std::ptr::eq(at, &r.brokers) {
                "brokers"
            } else {
                "topic"
            };
            return Err(self.at(at, &k(name), e));
        }
        Ok(out)
    }

    /// The flows' Parquet output: files named after the job (the sensor).
    fn parquet(
        &self,
        f: &RawFlows,
        k: &dyn Fn(&str) -> String,
        job: &str,
    ) -> Result<Option<ParquetOutput>, ConfigError> {
        let interval_ns = match &f.parquet_interval_s {
            None => weir_export::DEFAULT_INTERVAL_NS,
            Some(v) => {
                if f.parquet.is_none() {
                    return Err(self.at(v, &k("parquet_interval_s"), "give `parquet` too"));
                }
                self.secs_ns(v, &k("parquet_interval_s"), 1.0, 86400.0)?
            }
        };
        let Some(v) = &f.parquet else {
            return Ok(None);
        };
        // the directory itself is created when missing, so its parent must exist
        let dir = self.out_path(v, &k("parquet"))?;
        Ok(Some(ParquetOutput {
            dir,
            interval_ns,
            sensor: job.to_owned(),
            sync: true,
        }))
    }
}

/// ` (EXPR)` for a filter, nothing for none.
fn filtered(expr: &str) -> String {
    if expr.is_empty() {
        String::new()
    } else {
        format!(" ({expr})")
    }
}

/// The store directory as comparable: its parent resolved (links, `..`), then its name.
fn canonical_store(dir: &Path) -> PathBuf {
    if let Ok(c) = dir.canonicalize() {
        return c;
    }
    match (dir.parent().map(Path::canonicalize), dir.file_name()) {
        (Some(Ok(p)), Some(n)) => p.join(n),
        _ => dir.to_path_buf(),
    }
}

/// The id of group `name` (or a number given as is), from `/etc/group`.
pub fn group_id(name: &str) -> Option<u32> {
    if let Ok(n) = name.parse::<u32>() {
        return Some(n);
    }
    let text = std::fs::read_to_string("/etc/group").ok()?;
    text.lines().find_map(|l| {
        let mut f = l.split(':');
        (f.next()? == name).then_some(())?;
        f.nth(1)?.parse().ok()
    })
}

impl ServiceConfig {
    /// What would run, one line per item, for `weir run --check`.
    pub fn describe(&self) -> String {
        let mut s = String::new();
        match &self.control {
            Some(c) => s.push_str(&format!(
                "control socket {} (mode 0660{})\n",
                c.socket.display(),
                c.group
                    .as_ref()
                    .map(|(g, id)| format!(", group {g} ({id})"))
                    .unwrap_or_default()
            )),
            None => s.push_str("no control socket\n"),
        }
        if let Some(u) = &self.user {
            s.push_str(&format!(
                "runs as user {} (uid {}) once every job records, keeping {}\n",
                u.name,
                u.uid,
                crate::privilege::KEPT
            ));
        }
        if let Some(m) = &self.metrics {
            s.push_str(&format!("metrics on http://{}/metrics\n", m.listen));
        }
        if let Some(w) = &self.web {
            s.push_str(&format!("web page on http://{w}/ (read-only)\n"));
        }
        for j in &self.jobs {
            let r = &j.record;
            let sz = &r.sizes;
            let SourceConfig::Live(p) = &r.source else {
                continue;
            };
            s.push_str(&format!(
                "job {}: record {} into {} ({}, segments of {} MiB, writes of {} MiB, {}, {}, \
                 index {}), buffer {} MiB, {} thread(s), snaplen {}{}\n",
                j.name,
                j.interface,
                r.dir.display(),
                r.format.name(),
                sz.segment_mib,
                sz.write_mib,
                sz.max_mib
                    .map_or("no size limit".to_string(), |m| format!("at most {m} MiB")),
                r.max_age_ns.map_or("no age limit".to_string(), |a| format!(
                    "at most {} s old",
                    a as f64 / 1e9
                )),
                sz.index_chunk_kib
                    .map_or("off".to_string(), |c| format!("on ({c} KiB chunks)")),
                p.buffer_bytes >> 20,
                p.threads,
                p.snaplen,
                if p.filter.is_empty() {
                    String::new()
                } else {
                    format!(", filter `{}`", p.filter)
                }
            ));
            if let Some(rules) = &r.rules {
                s.push_str(&format!("  rules {}\n", rules.path.display()));
            }
            for st in &r.streams {
                s.push_str(&format!(
                    "  stream {} to {}{}\n",
                    st.name,
                    st.target,
                    if st.filter.is_empty() {
                        String::new()
                    } else {
                        format!(" ({})", st.filter)
                    }
                ));
            }
            if let Some(h) = &r.http {
                s.push_str(&format!(
                    "  http: {} log to {}{}{}\n",
                    match h.logs.format {
                        weir_http::log::Format::Json => "JSON",
                        weir_http::log::Format::Apache => "Apache combined",
                    },
                    h.logs.http.display(),
                    h.logs
                        .tls
                        .as_ref()
                        .map(|t| format!(", TLS log to {}", t.display()))
                        .unwrap_or_default(),
                    filtered(&h.filter)
                ));
            }
            if let Some(v) = &r.voip {
                s.push_str(&format!(
                    "  voip: calls to {}{}{}\n",
                    v.outputs.calls.display(),
                    v.outputs
                        .streams
                        .as_ref()
                        .map(|t| format!(", streams to {}", t.display()))
                        .unwrap_or_default(),
                    filtered(&v.filter)
                ));
            }
            if let Some(f) = &r.flows {
                let mut outs = Vec::new();
                if let Some(n) = &f.outputs.netflow {
                    outs.push(format!("{:?} to {}", n.format, n.label).to_lowercase());
                }
                if let Some(p) = &f.outputs.json {
                    outs.push(format!("JSON lines to {}", p.display()));
                }
                if let Some(p) = &f.outputs.csv {
                    outs.push(format!("CSV to {}", p.display()));
                }
                if let Some(k) = &f.outputs.kafka {
                    outs.push(k.name());
                }
                if let Some(p) = &f.outputs.parquet {
                    outs.push(format!("Parquet files under {}", p.dir.display()));
                }
                if outs.is_empty() {
                    outs.push(format!(
                        "JSON lines to {}",
                        r.dir.join("flows.json").display()
                    ));
                }
                s.push_str(&format!(
                    "  flows: idle timeout {} s, active timeout {} s, {}\n",
                    f.meter.idle_timeout_ns as f64 / 1e9,
                    f.meter.active_timeout_ns as f64 / 1e9,
                    outs.join(", ")
                ));
            }
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(text: &str) -> Result<ServiceConfig, ConfigError> {
        parse(Path::new("/tmp/weir-test.toml"), text)
    }

    /// A minimal config on the loopback interface parses with the defaults.
    #[test]
    fn minimal_config_takes_the_defaults() {
        let c = check("[[record]]\ninterface = \"lo\"\nstore = \"/tmp/weir-cfg-store\"\n").unwrap();
        assert_eq!(c.jobs.len(), 1);
        let j = &c.jobs[0];
        assert_eq!(j.name, "lo");
        assert_eq!(j.record.sizes.segment_mib, 1024);
        assert_eq!(j.record.sizes.write_mib, 4);
        assert!(j.record.flows.is_none() && c.control.is_none());
    }

    /// Each bad value is named by its line, column and key.
    #[test]
    fn errors_name_line_column_and_key() {
        let base = "[[record]]\ninterface = \"lo\"\nstore = \"/tmp/weir-cfg-store\"\n";
        let cases = [
            (
                "segment_mib = -5\n",
                "4:15",
                "record[0].segment_mib: must be between 1",
            ),
            ("segment_mib = 0\n", "4:15", "record[0].segment_mib"),
            (
                "max_age_s = nan\n",
                "4:13",
                "record[0].max_age_s: must be a number",
            ),
            ("max_age_s = inf\n", "4:13", "record[0].max_age_s"),
            ("buffer_mib = 3\n", "4:14", "3 is not a power of two"),
            ("segmnt_mib = 5\n", "4:1", "unknown field `segmnt_mib`"),
            ("format = \"pcapx\"\n", "4:10", "record[0].format"),
            ("segment_mib = 99999999999999999999\n", "4:15", ""),
        ];
        for (extra, at, want) in cases {
            let e = check(&format!("{base}{extra}")).unwrap_err();
            let s = e.to_string();
            assert!(
                s.starts_with(&format!("/tmp/weir-test.toml:{at}: ")),
                "{extra}: {s}"
            );
            assert!(s.contains(want), "{extra}: {s}");
            assert!(s.contains(&format!("\n  4 | {}", extra.trim_end())), "{s}");
        }
    }

    /// Two jobs on one store, one interface twice, a missing interface, a store whose parent
    /// is missing: each refused with its key.
    #[test]
    fn jobs_are_checked_together() {
        let e = check(
            "[[record]]\ninterface = \"lo\"\nstore = \"/tmp/s1\"\n\
             [[record]]\nname = \"b\"\ninterface = \"lo\"\nstore = \"/tmp/s2\"\n",
        )
        .unwrap_err();
        assert_eq!(e.at, Some((6, 13)), "{e}");
        assert!(e
            .to_string()
            .contains("record[1].interface: interface lo is also record[0]'s"));
        let e = check("[[record]]\ninterface = \"nosuchif0\"\nstore = \"/tmp/s1\"\n").unwrap_err();
        assert_eq!(e.at, Some((2, 13)));
        assert_eq!(e.key.as_deref(), Some("record[0].interface"));
        let e =
            check("[[record]]\ninterface = \"lo\"\nstore = \"/nonexistent/x/s\"\n").unwrap_err();
        assert!(
            e.to_string().contains("/nonexistent/x does not exist"),
            "{e}"
        );
        let e = check("").unwrap_err();
        assert!(e.to_string().contains("no job"), "{e}");
    }
}
