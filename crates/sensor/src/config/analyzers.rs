//! The `[[http]]` and `[[voip]]` tables of a config file: the HTTP/TLS and SIP/RTP analyzers
//! as jobs of `weir run`, each a best-effort reader of the buffer of the record job on its
//! interface (the capture pipeline is shared: one capture per interface), at most one of each
//! per record job.
//!
//! ```toml
//! [[http]]
//! interface = "eth0"          # the record job's interface (default: the only record job)
//! filter = "tcp"              # tcpdump syntax (default: every packet the job records)
//! log = "/var/log/weir/http.jsonl"     # the transactions (written in place)
//! format = "json"             # json (Zeek http.log's fields) or apache (combined log)
//! tls_log = "/var/log/weir/tls.jsonl"  # one JSON line per TLS handshake (optional)
//! max_flows = 500000          # connections tracked at once (1 ..= 100000000)
//! max_memory_mib = 256        # bytes held out of order over all connections (1 ..= 65536)
//! idle_timeout_s = 300        # a connection ends after this long without a packet
//!
//! [[voip]]
//! interface = "eth0"
//! filter = "udp"
//! calls = "/var/log/weir/calls.jsonl"      # call records (and stream records without `streams`)
//! streams = "/var/log/weir/streams.jsonl"  # RTP stream records (optional)
//! max_calls = 1000000         # Call-IDs tracked (1 ..= 100000000)
//! max_streams = 1000000       # RTP streams tracked (1 ..= 100000000)
//! call_linger_s = 2           # a call that is over is written after this long without a packet
//! call_timeout_s = 300        # a call (or heuristic stream) idle this long is written as it stands
//! plot = "/var/lib/weir/charts"   # each call's jitter/loss chart (SVG + CSV), when it is written
//! plot_interval_s = 1         # the charts' interval
//! ```

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Deserialize;
use toml::Spanned;

use super::{canonical_store, ConfigError, Cx, JobConfig};
use crate::http::{HttpBeside, HttpLogs};
use crate::voip::{VoipBeside, VoipOutputs};

/// One `[[http]]` table as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawHttp {
    interface: Option<Spanned<String>>,
    filter: Option<Spanned<String>>,
    log: Spanned<String>,
    format: Option<Spanned<String>>,
    tls_log: Option<Spanned<String>>,
    max_flows: Option<Spanned<i64>>,
    max_memory_mib: Option<Spanned<i64>>,
    idle_timeout_s: Option<Spanned<f64>>,
    kafka: Option<Spanned<super::RawKafka>>,
}

/// One `[[voip]]` table as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawVoip {
    interface: Option<Spanned<String>>,
    filter: Option<Spanned<String>>,
    calls: Spanned<String>,
    streams: Option<Spanned<String>>,
    max_calls: Option<Spanned<i64>>,
    max_streams: Option<Spanned<i64>>,
    call_linger_s: Option<Spanned<f64>>,
    call_timeout_s: Option<Spanned<f64>>,
    plot: Option<Spanned<String>>,
    plot_interval_s: Option<Spanned<f64>>,
    kafka: Option<Spanned<super::RawKafka>>,
}

impl Cx<'_> {
    /// An analyzer's `kafka` table: `[record.flows.kafka]`'s keys but `topic` and `format` (the
    /// topics are weir.http/weir.tls or weir.calls/weir.rtp, the records JSON).
    fn analyzer_kafka(
        &self,
        raw: Option<&Spanned<super::RawKafka>>,
        key: &str,
    ) -> Result<Option<weir_export::KafkaOutput>, ConfigError> {
        let Some(r) = raw else { return Ok(None) };
        let k = format!("{key}.kafka");
        let r = r.get_ref();
        for (v, name) in [(&r.topic, "topic"), (&r.format, "format")] {
            if let Some(v) = v {
                return Err(self.at(
                    v,
                    &format!("{k}.{name}"),
                    format!(
                        "an analyzer's records go to their own topics (weir.http, weir.tls, \
                         weir.calls, weir.rtp) as JSON: leave out `{name}`"
                    ),
                ));
            }
        }
        if let Some(v) = &r.records_per_message {
            return Err(self.at(
                v,
                &format!("{k}.records_per_message"),
                "an analyzer's records go one per message: leave out `records_per_message`",
            ));
        }
        self.kafka(r, &k).map(Some)
    }

    /// The record job an analyzer table attaches to: the one on `interface`, or the only one.
    fn analyzer_job(
        &self,
        interface: Option<&Spanned<String>>,
        first: &Spanned<String>,
        key: &str,
        jobs: &[JobConfig],
    ) -> Result<usize, ConfigError> {
        match interface {
            Some(i) => jobs
                .iter()
                .position(|j| &j.interface == i.get_ref())
                .ok_or_else(|| {
                    self.at(
                        i,
                        &format!("{key}.interface"),
                        format!(
                            "no [[record]] job on `{}` (an analyzer reads a record job's capture; \
                             record jobs on: {})",
                            i.get_ref(),
                            jobs.iter()
                                .map(|j| j.interface.as_str())
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                    )
                }),
            None if jobs.len() == 1 => Ok(0),
            None => Err(self.at(
                first,
                &format!("{key}.interface"),
                "several record jobs: name the interface whose packets it analyzes",
            )),
        }
    }

    /// A filter checked against the job's interface (empty when none is given).
    fn analyzer_filter(
        &self,
        f: Option<&Spanned<String>>,
        key: &str,
        job: &JobConfig,
    ) -> Result<String, ConfigError> {
        let Some(f) = f else {
            return Ok(String::new());
        };
        let link =
            weir_capture::link_type(&job.interface).unwrap_or(weir_packet::LinkType::ETHERNET);
        weir_filter::Filter::compile(f.get_ref(), link, 262_144)
            .map_err(|e| self.at(f, &format!("{key}.filter"), e))?;
        Ok(f.get_ref().clone())
    }

    /// An output file of an analyzer, its parent present and no other output's path.
    fn analyzer_out(
        &self,
        v: &Spanned<String>,
        key: &str,
        files: &mut BTreeMap<PathBuf, String>,
    ) -> Result<PathBuf, ConfigError> {
        let p = self.out_path(v, key)?;
        let canon = canonical_store(&p);
        if canon.is_dir() {
            return Err(self.at(v, key, format!("{} is a directory", p.display())));
        }
        if let Some(other) = files.insert(canon.clone(), key.to_string()) {
            return Err(self.at(
                v,
                key,
                format!(
                    "{} is also {other}: give each output its own file",
                    canon.display()
                ),
            ));
        }
        Ok(p)
    }

    /// Checks the `[[http]]` tables and hands each to its record job.
    pub(super) fn http_jobs(
        &self,
        raw: &[Spanned<RawHttp>],
        jobs: &mut [JobConfig],
        files: &mut BTreeMap<PathBuf, String>,
    ) -> Result<(), ConfigError> {
        let mut taken = BTreeMap::new();
        for (i, h) in raw.iter().enumerate() {
            let key = format!("http[{i}]");
            let k = |f: &str| format!("{key}.{f}");
            let r = h.get_ref();
            let j = self.analyzer_job(r.interface.as_ref(), &r.log, &key, jobs)?;
            if let Some(other) = taken.insert(j, i) {
                let at = r.interface.as_ref().unwrap_or(&r.log);
                return Err(self.at(
                    at,
                    &k("interface"),
                    format!(
                        "http[{other}] analyzes {} already: one [[http]] job per interface",
                        jobs[j].interface
                    ),
                ));
            }
            let filter = self.analyzer_filter(r.filter.as_ref(), &key, &jobs[j])?;
            let format = match &r.format {
                None => weir_http::log::Format::Json,
                Some(v) => match v.get_ref().as_str() {
                    "json" => weir_http::log::Format::Json,
                    "apache" => weir_http::log::Format::Apache,
                    o => {
                        return Err(self.at(
                            v,
                            &k("format"),
                            format!("`{o}` is no HTTP log format (json or apache)"),
                        ))
                    }
                },
            };
            let http = self.analyzer_out(&r.log, &k("log"), files)?;
            let tls = r
                .tls_log
                .as_ref()
                .map(|v| self.analyzer_out(v, &k("tls_log"), files))
                .transpose()?;
            let mut analyzer = weir_http::Config::default();
            if let Some(v) = &r.max_flows {
                analyzer.max_flows = self.int(v, &k("max_flows"), 1, 100_000_000)? as usize;
            }
            if let Some(v) = &r.max_memory_mib {
                analyzer.max_total_pending =
                    (self.int(v, &k("max_memory_mib"), 1, 65536)? as usize) << 20;
            }
            if let Some(v) = &r.idle_timeout_s {
                analyzer.idle_timeout_ns = self.secs_ns(v, &k("idle_timeout_s"), 1e-3, 1e6)?;
            }
            let kafka = self.analyzer_kafka(r.kafka.as_ref(), &key)?;
            if kafka.is_some() && format != weir_http::log::Format::Json {
                let at = r.format.as_ref().unwrap_or(&r.log);
                return Err(self.at(
                    at,
                    &k("format"),
                    "Kafka takes the HTTP log as JSON, not in Apache's format".to_owned(),
                ));
            }
            jobs[j].record.http = Some(HttpBeside {
                filter,
                analyzer,
                logs: HttpLogs {
                    format,
                    http,
                    tls,
                    kafka,
                },
            });
        }
        Ok(())
    }

    /// Checks the `[[voip]]` tables and hands each to its record job.
    pub(super) fn voip_jobs(
        &self,
        raw: &[Spanned<RawVoip>],
        jobs: &mut [JobConfig],
        files: &mut BTreeMap<PathBuf, String>,
    ) -> Result<(), ConfigError> {
        let mut taken = BTreeMap::new();
        for (i, v) in raw.iter().enumerate() {
            let key = format!("voip[{i}]");
            let k = |f: &str| format!("{key}.{f}");
            let r = v.get_ref();
            let j = self.analyzer_job(r.interface.as_ref(), &r.calls, &key, jobs)?;
            if let Some(other) = taken.insert(j, i) {
                let at = r.interface.as_ref().unwrap_or(&r.calls);
                return Err(self.at(
                    at,
                    &k("interface"),
                    format!(
                        "voip[{other}] analyzes {} already: one [[voip]] job per interface",
                        jobs[j].interface
                    ),
                ));
            }
            let filter = self.analyzer_filter(r.filter.as_ref(), &key, &jobs[j])?;
            let calls = self.analyzer_out(&r.calls, &k("calls"), files)?;
            let streams = r
                .streams
                .as_ref()
                .map(|v| self.analyzer_out(v, &k("streams"), files))
                .transpose()?;
            let mut analyzer = weir_voip::Config::default();
            if let Some(v) = &r.max_calls {
                analyzer.max_calls = self.int(v, &k("max_calls"), 1, 100_000_000)? as usize;
            }
            if let Some(v) = &r.max_streams {
                analyzer.max_streams = self.int(v, &k("max_streams"), 1, 100_000_000)? as usize;
            }
            if let Some(v) = &r.call_linger_s {
                analyzer.linger_ns = self.secs_ns(v, &k("call_linger_s"), 1e-3, 1e6)?;
            }
            if let Some(v) = &r.call_timeout_s {
                analyzer.call_timeout_ns = self.secs_ns(v, &k("call_timeout_s"), 1e-3, 1e6)?;
            }
            let plot = match &r.plot {
                Some(v) => {
                    let p = self.out_path(v, &k("plot"))?;
                    if p.exists() && !p.is_dir() {
                        return Err(self.at(
                            v,
                            &k("plot"),
                            format!("{} is not a directory", p.display()),
                        ));
                    }
                    let interval = match &r.plot_interval_s {
                        Some(i) => self.secs(i, &k("plot_interval_s"), 1e-3, 1e6)?,
                        None => 1.0,
                    };
                    analyzer.timeline_ns = weir_packet::value::ns(interval).max(1);
                    Some(p)
                }
                None => {
                    if let Some(i) = &r.plot_interval_s {
                        return Err(self.at(
                            i,
                            &k("plot_interval_s"),
                            "plot_interval_s configures plot: give plot too",
                        ));
                    }
                    None
                }
            };
            jobs[j].record.voip = Some(VoipBeside {
                filter,
                analyzer,
                outputs: VoipOutputs {
                    calls,
                    streams,
                    kafka: self.analyzer_kafka(r.kafka.as_ref(), &key)?,
                    plot,
                },
            });
        }
        Ok(())
    }
}
