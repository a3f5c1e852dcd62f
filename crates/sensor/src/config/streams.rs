//! The `[[stream]]` tables of a config file: live streams ([`crate::stream`]) of a record job's
//! buffer.
//!
//! ```toml
//! [[stream]]
//! name = "dns"               # unique among streams (default stream-N)
//! job = "eth0"               # the record job whose buffer it reads (default: the only job)
//! to = "/run/weir/dns.fifo"  # an existing FIFO, or unix:PATH (a socket weir listens on)
//! filter = "udp port 53"     # tcpdump syntax (default: every packet)
//! queue_kib = 4096           # between the stream's consumer and its reader (64 ..= 1048576)
//! ```

use std::collections::BTreeMap;

use serde::Deserialize;
use toml::Spanned;

use super::{canonical_store, ConfigError, Cx, JobConfig};
use crate::stream::{StreamConfig, Target};

/// One `[[stream]]` table as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawStream {
    name: Option<Spanned<String>>,
    job: Option<Spanned<String>>,
    to: Spanned<String>,
    filter: Option<Spanned<String>>,
    queue_kib: Option<Spanned<i64>>,
}

impl Cx<'_> {
    /// Checks the streams and hands each to its job.
    pub(super) fn streams(
        &self,
        raw: &[Spanned<RawStream>],
        jobs: &mut [JobConfig],
    ) -> Result<(), ConfigError> {
        let mut names = BTreeMap::new();
        let mut targets = BTreeMap::new();
        for (i, s) in raw.iter().enumerate() {
            let key = format!("stream[{i}]");
            let k = |f: &str| format!("{key}.{f}");
            let r = s.get_ref();
            let name = match &r.name {
                Some(n) if n.get_ref().is_empty() || n.get_ref().chars().any(char::is_control) => {
                    return Err(self.at(n, &k("name"), "must be a non-empty name"));
                }
                Some(n) => n.get_ref().clone(),
                None => format!("stream-{i}"),
            };
            if let Some(other) = names.insert(name.clone(), i) {
                let at = r.name.as_ref().map_or(r.to.span(), |n| n.span());
                return Err(self.err(
                    Some(at.start),
                    Some(k("name")),
                    format!("stream name `{name}` is also stream[{other}]'s"),
                ));
            }
            let job = match &r.job {
                Some(j) => jobs
                    .iter()
                    .position(|x| &x.name == j.get_ref())
                    .ok_or_else(|| {
                        self.at(
                            j,
                            &k("job"),
                            format!(
                                "no record job `{}` (jobs: {})",
                                j.get_ref(),
                                jobs.iter()
                                    .map(|x| x.name.as_str())
                                    .collect::<Vec<_>>()
                                    .join(", ")
                            ),
                        )
                    })?,
                None if jobs.len() == 1 => 0,
                None => {
                    return Err(self.at(
                        &r.to,
                        &k("job"),
                        "several record jobs: name the one whose packets the stream carries \
                         with `job`",
                    ))
                }
            };
            let target: Target =
                r.to.get_ref()
                    .parse()
                    .map_err(|e| self.at(&r.to, &k("to"), e))?;
            let target =
                match target {
                    Target::Stdout => return Err(self.at(
                        &r.to,
                        &k("to"),
                        "a service has no standard output to stream to: give a FIFO or unix:PATH",
                    )),
                    t => t.relative_to(
                        self.path
                            .parent()
                            .filter(|d| !d.as_os_str().is_empty())
                            .unwrap_or(std::path::Path::new(".")),
                    ),
                };
            target.check().map_err(|e| self.at(&r.to, &k("to"), e))?;
            let path = match &target {
                Target::Fifo(p) | Target::Unix(p) => canonical_store(p),
                Target::Stdout => unreachable!("refused above"),
            };
            if let Some(other) = targets.insert(path.clone(), i) {
                return Err(self.at(
                    &r.to,
                    &k("to"),
                    format!(
                        "{} is also stream[{other}]'s: each stream needs its own reader",
                        path.display()
                    ),
                ));
            }
            let filter = r
                .filter
                .as_ref()
                .map_or(String::new(), |f| f.get_ref().clone());
            if let Some(f) = &r.filter {
                let link = weir_capture::link_type(&jobs[job].interface)
                    .unwrap_or(weir_packet::LinkType::ETHERNET);
                weir_filter::Filter::compile(f.get_ref(), link, 262_144)
                    .map_err(|e| self.at(f, &k("filter"), e))?;
            }
            let queue_bytes = match &r.queue_kib {
                Some(v) => (self.int(v, &k("queue_kib"), 64, 1 << 20)? as usize) << 10,
                None => crate::stream::DEFAULT_QUEUE_BYTES,
            };
            jobs[job].record.streams.push(StreamConfig {
                name,
                filter,
                target,
                queue_bytes,
            });
        }
        Ok(())
    }
}
