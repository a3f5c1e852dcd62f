//! The flows job: packets from capture files or a live pipeline into the flow meter
//! (weir-flows), the flows exported to the outputs of a [`weir_export::Outputs`], and a report
//! of every counter ([`weir_export::RunReport`]).
//!
//! Files: the packets come from the read loop ([`crate::read`]: BPF filter, the rules in file
//! order, damage handling) into a [`FileMeter`]; one large classic pcap file is metered on every
//! core instead ([`meter_parallel`]), unless there are rules (they decide the packets of a flow
//! in file order, on the reading thread). Live: the meter reads the capture pipeline's packet
//! buffer ([`meter_live_polling`]); with rules, every capture thread decides each packet after
//! the filter, as in the record job: what the rules drop is not metered, a sliced packet is
//! metered from its headers, a tagged packet's record carries its tag to the meter (the pcapng
//! comment `weir-tag=TAG`), and each flow is exported with the last tag seen. The rules are
//! reloaded when the caller asks and their control socket is served while the job runs.

use std::path::PathBuf;
use std::time::Duration;

use weir_capture::PipelineConfig;
use weir_export::{Fanout, Outputs, RunError, RunReport, StatsFile};
use weir_filter::FilterSet;
use weir_flows::{meter_live_polling, meter_parallel, FileMeter, Meter, RANGE_BYTES};
use weir_pcap::{FileReader, Interface, Packet, ReadError};
use weir_rules::Tag;

use crate::live::announcement;
pub use crate::live::LiveEnd;
use crate::read::{self, matches, parallel_plan, Observer, ReadConfig, Visitor};
use crate::rules::{self, LiveRules, RulesConfig};
use crate::{Controls, Event, SensorError};

/// Where the flows job's packets come from.
#[derive(Clone, Debug)]
pub enum FlowsSource {
    /// Live capture; the job sets the buffer's readers and the rules itself.
    Live(PipelineConfig),
    /// Capture files, read in order (`-` is stdin).
    Files(Vec<PathBuf>),
}

/// What the flows job does.
#[derive(Clone, Debug)]
pub struct FlowsJobConfig {
    /// Where packets come from.
    pub source: FlowsSource,
    /// The filter expression for files (live, the pipeline's own).
    pub filter: String,
    /// The rules (files: applied in file order; live: in the capture threads, with the
    /// control socket).
    pub rules: Option<RulesConfig>,
    /// The meter's timeouts, shards and key.
    pub meter: weir_flows::Config,
    /// Where flows go.
    pub outputs: Outputs,
    /// Write every counter of the run as JSON to this file (created before the run).
    pub stats: Option<PathBuf>,
    /// Stop after this long (live).
    pub duration: Option<Duration>,
}

/// What a flows job did.
#[derive(Debug)]
pub struct FlowsJobReport {
    /// The meter's counters and its outputs'.
    pub report: RunReport,
    /// The run's first export error, if any.
    pub error: Option<RunError>,
    /// Some input could not be read entirely (files).
    pub damaged: bool,
    /// Capture's counters (live).
    pub live: Option<LiveEnd>,
    /// The rules' summary lines, when there are rules (live: with what they dropped).
    pub rules: Option<String>,
    /// The statistics file, still to write ([`FlowsJobReport::write_stats`]).
    stats: Option<(StatsFile, serde_json::Map<String, serde_json::Value>)>,
}

impl FlowsJobReport {
    /// Writes the statistics file, if one was asked for (the report, with the rules' counters
    /// live).
    pub fn write_stats(&mut self) -> Result<(), SensorError> {
        if let Some((file, extra)) = self.stats.take() {
            file.write_with(&self.report, extra)?;
        }
        Ok(())
    }
}

/// Runs a flows job to its end: every file read, or (live) until `controls.stop` is set, the
/// duration has passed or capture fails. Says what happens through `obs` (events, damage, the
/// progress through each file). A meter config [`weir_flows::Config::check`] refuses is an
/// error before any output is opened.
pub fn run(
    cfg: &FlowsJobConfig,
    controls: &Controls,
    obs: &mut dyn Observer,
) -> Result<FlowsJobReport, SensorError> {
    cfg.meter.check()?;
    let sinks = cfg.outputs.open()?;
    // created now, so that a bad path fails before the run rather than after it
    let stats = cfg.stats.as_deref().map(StatsFile::create).transpose()?;
    match &cfg.source {
        FlowsSource::Live(live) => run_live(cfg, live, sinks, stats, controls, obs),
        FlowsSource::Files(files) => run_files(cfg, files, sinks, stats, obs),
    }
}

/// The meter behind the read loop.
struct Files(FileMeter<Fanout>);

impl Visitor for Files {
    type Error = SensorError;

    fn start_file(&mut self, _reader: &FileReader) -> Result<(), SensorError> {
        self.0.start_input();
        Ok(())
    }

    #[inline]
    fn packet(&mut self, _: &[Interface], packet: &Packet<'_>) -> Result<(), SensorError> {
        self.0.packet(packet.link, packet.meta.ts_ns, packet.data);
        Ok(())
    }

    /// Behind the rules: the packets they keep, with their tags.
    #[inline]
    fn ruled(
        &mut self,
        _: &[Interface],
        packet: &Packet<'_>,
        tag: Option<&Tag>,
    ) -> Result<(), SensorError> {
        self.0
            .packet_tagged(packet.link, packet.meta.ts_ns, packet.data, tag);
        Ok(())
    }

    fn parallel_read(&self) -> bool {
        false
    }

    fn end_file(&mut self, reader: &FileReader, _: Option<&ReadError>) -> Result<(), SensorError> {
        self.0.end_input(reader.packets());
        Ok(())
    }
}

/// Files: one large classic pcap file on every core, else the read loop into a [`FileMeter`].
fn run_files(
    cfg: &FlowsJobConfig,
    files: &[PathBuf],
    sinks: Fanout,
    stats: Option<StatsFile>,
    obs: &mut dyn Observer,
) -> Result<FlowsJobReport, SensorError> {
    let mut filters = FilterSet::new(&cfg.filter)?;
    // one large classic pcap file: read on every core (not with rules: they decide the packets
    // of a flow in file order, on the reading thread)
    if let ([single], None) = (files, &cfg.rules) {
        if let Some(plan) = parallel_plan(single, RANGE_BYTES) {
            let filter = if filters.is_empty() {
                None
            } else {
                Some(filters.for_interface(&plan.interfaces()[0])?.clone())
            };
            let run = meter_parallel(&cfg.meter, sinks, plan, |p| matches(filter.as_ref(), p))?;
            if let Some(e) = &run.damage {
                obs.event(Event::Warning(e.to_string()));
            }
            let (report, error) = RunReport::finish(run.metered);
            return Ok(FlowsJobReport {
                report,
                error,
                damaged: run.damage.is_some(),
                live: None,
                rules: None,
                stats: stats.map(|s| (s, serde_json::Map::new())),
            });
        }
    }
    let read_cfg = ReadConfig {
        files: files.to_vec(),
        filter: cfg.filter.clone(),
        rules: cfg.rules.as_ref().map(|r| r.path.clone()),
        // the tags go into the flow records
        tags_stored: true,
    };
    let mut meter = Files(FileMeter::new(&cfg.meter, sinks));
    let read = read::run(&read_cfg, &mut meter, obs)?;
    let (report, error) = RunReport::finish(meter.0.finish());
    Ok(FlowsJobReport {
        report,
        error,
        damaged: read.damaged,
        live: None,
        rules: read.rules,
        stats: stats.map(|s| (s, serde_json::Map::new())),
    })
}

/// Live: the capture pipeline (with the rule engine in every capture thread when there are
/// rules) feeding the live meter until `controls.stop`, the duration or a failed capture
/// thread ends it.
fn run_live(
    cfg: &FlowsJobConfig,
    live: &PipelineConfig,
    sinks: Fanout,
    stats: Option<StatsFile>,
    controls: &Controls,
    obs: &mut dyn Observer,
) -> Result<FlowsJobReport, SensorError> {
    let mut events = |e| obs.event(e);
    let rules_path = cfg.rules.as_ref().map(|r| r.path.as_path());
    let rule_set = rules_path.map(rules::load).transpose()?;
    let set_tags = rule_set.as_ref().is_some_and(LiveRules::set_tags);
    let engine = rule_set
        .zip(rules_path)
        .map(|(set, path)| rules::live_engine(&live.interfaces, live.snaplen, set, path))
        .transpose()?;
    let _control = match (cfg.rules.as_ref().and_then(|r| r.control.as_ref()), &engine) {
        (Some(socket), Some(engine)) => {
            let server = rules::serve_control(socket, engine, rules_path.map(PathBuf::from))?;
            events(Event::Notice(format!(
                "rules control socket on {}",
                socket.display()
            )));
            Some(server)
        }
        _ => None,
    };
    let mut rules = match (&engine, rules_path) {
        (Some(e), Some(p)) => Some(LiveRules::new(
            p,
            e.clone(),
            true,
            set_tags,
            "`weir flows`",
            &mut events,
        )),
        _ => None,
    };
    let mut pipeline_cfg = live.clone();
    pipeline_cfg.readers = 1;
    pipeline_cfg.best_effort_readers = 0;
    // tags travel to the meter as the records' comments
    pipeline_cfg.rules = engine.map(|engine| weir_capture::Rules {
        engine,
        store_tags: true,
    });
    let mut pipeline = weir_capture::Pipeline::start(&pipeline_cfg)?;
    for line in announcement(&pipeline_cfg, &pipeline, "metering flows") {
        events(line);
    }
    let run = meter_live_polling(
        &mut pipeline,
        0,
        Meter::new(&cfg.meter, sinks),
        &controls.stop,
        cfg.duration,
        || {
            if let Some(r) = rules.as_mut() {
                r.poll(controls.reload, &mut events);
            }
        },
    )?;
    let mut extra = serde_json::Map::new();
    if let Some(r) = &rules {
        extra.insert("rules".into(), r.json(&run.capture.feed));
    }
    let rules = rules.as_ref().map(|r| {
        format!(
            "  rules: {} dropped after the filter (not metered)\n{}",
            run.capture.feed.rules_dropped,
            r.summary(&run.capture.feed)
        )
    });
    let (report, error) = RunReport::finish(run.metered);
    Ok(FlowsJobReport {
        report,
        error,
        damaged: false,
        live: Some(LiveEnd {
            totals: run.capture,
            buffer: run.buffer,
        }),
        rules,
        stats: stats.map(|s| (s, extra)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::convert::Convert;
    use crate::record::tests::frame;
    use weir_packet::{LinkType, PacketMeta};
    use weir_pcap::{FileFormat, Precision};

    /// Ten packets alternating between ports 1000 and 2000 (payloads 0 to 9), in a pcap file
    /// in `dir`, and a rule file that drops port 2000 and tags port 1000.
    fn inputs(dir: &std::path::Path) -> (PathBuf, PathBuf, Vec<(u64, Vec<u8>)>) {
        let input = dir.join("in.pcap");
        let packets: Vec<(u64, Vec<u8>)> = (0..10u64)
            .map(|i| {
                let sport = if i % 2 == 0 { 1000 } else { 2000 };
                (
                    1_700_000_000_000_000_000 + i * 1_000,
                    frame(sport, i as usize),
                )
            })
            .collect();
        let mut w = weir_pcap::PacketWriter::new(
            std::fs::File::create(&input).unwrap(),
            FileFormat::Pcap(Precision::Nano),
            &[Interface::new(LinkType::ETHERNET, 65535)],
        )
        .unwrap();
        for (ts, data) in &packets {
            let meta = PacketMeta {
                ts_ns: *ts,
                orig_len: data.len() as u32,
                interface: 0,
            };
            w.write(&meta, data).unwrap();
        }
        w.finish().unwrap();
        let rules = dir.join("r.rules");
        std::fs::write(&rules, "sport 2000 -> drop\nsport 1000 -> tag a pass\n").unwrap();
        (input, rules, packets)
    }

    /// The read job with rules into a classic pcap file: the five packets of port 1000 are
    /// written byte for byte, their five tags counted as lost; the summary has the live
    /// jobs' wording and the counts by hand.
    #[test]
    fn read_applies_the_rules_in_file_order() {
        let dir = tempfile::tempdir().unwrap();
        let (input, rules, packets) = inputs(dir.path());
        let cfg = ReadConfig {
            files: vec![input],
            filter: String::new(),
            rules: Some(rules),
            tags_stored: false,
        };
        let mut out = Convert::new(Vec::new(), FileFormat::Pcap(Precision::Nano), None);
        let mut events = Vec::new();
        let report = read::run(&cfg, &mut out, &mut |e| events.push(e)).unwrap();
        assert!(events.is_empty() && !report.damaged, "{events:?}");
        let summary = report.rules.unwrap();
        assert!(
            summary.starts_with(
                "  rules (version 1, 0 reload(s), 0 failed): 10 in, 5 passed, 5 dropped (0 cut \
                 off per flow), 0 sliced, 0 sampled out, 0 matched no rule; 5 tagged (tags not \
                 stored)"
            ),
            "{summary}"
        );
        let (bytes, tags_lost) = out.finish().unwrap();
        assert_eq!(tags_lost, 5);
        let file = dir.path().join("out.pcap");
        std::fs::write(&file, bytes).unwrap();
        let mut r = FileReader::open(&file).unwrap();
        let mut got = Vec::new();
        while let Some(p) = r.next_packet().unwrap() {
            got.push((p.meta.ts_ns, p.data.to_vec()));
        }
        let want: Vec<_> = packets.into_iter().step_by(2).collect();
        assert_eq!(got, want);
    }

    /// The flows job on a file with rules: one flow (port 1000: five packets, IP lengths 28,
    /// 30, 32, 34, 36), exported with its tag; port 2000 is dropped before the meter.
    #[test]
    fn flows_meter_what_the_rules_keep() {
        let dir = tempfile::tempdir().unwrap();
        let (input, rules, _) = inputs(dir.path());
        let json = dir.path().join("flows.json");
        let cfg = FlowsJobConfig {
            source: FlowsSource::Files(vec![input]),
            filter: "udp".into(),
            rules: Some(RulesConfig {
                path: rules,
                control: None,
            }),
            meter: weir_flows::Config {
                workers: 1,
                ..weir_flows::Config::default()
            },
            outputs: Outputs {
                json: Some(json.clone()),
                tags: true,
                ..Outputs::default()
            },
            stats: None,
            duration: None,
        };
        let mut events = Vec::new();
        let mut report = run(&cfg, &Controls::default(), &mut |e| events.push(e)).unwrap();
        report.write_stats().unwrap();
        assert!(events.is_empty() && !report.damaged && report.error.is_none());
        assert!(report.live.is_none());
        let rules = report.rules.unwrap();
        assert!(rules.contains(": 10 in, 5 passed, 5 dropped"), "{rules}");
        assert!(rules.contains("; 5 tagged\n"), "{rules}");
        let text = std::fs::read_to_string(&json).unwrap();
        let flows: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(flows.len(), 1, "{text}");
        let f = &flows[0];
        assert_eq!(
            (
                &f["sourceTransportPort"],
                &f["packetDeltaCount"],
                &f["octetDeltaCount"],
                &f["tag"]
            ),
            (
                &serde_json::json!(1000),
                &serde_json::json!(5),
                &serde_json::json!(28 + 30 + 32 + 34 + 36),
                &serde_json::json!("a")
            ),
            "{text}"
        );
    }

    /// A meter of 256 shards and one flow more than they hold (rounded up, 16777215 per
    /// shard) is refused before its output is created.
    #[test]
    fn flows_refuse_a_meter_over_the_flow_limit() {
        let dir = tempfile::tempdir().unwrap();
        let (input, _, _) = inputs(dir.path());
        let json = dir.path().join("flows.json");
        let cfg = FlowsJobConfig {
            source: FlowsSource::Files(vec![input]),
            filter: String::new(),
            rules: None,
            meter: weir_flows::Config {
                max_flows: 256 * 16_777_214 + 1,
                workers: 256,
                ..weir_flows::Config::default()
            },
            outputs: Outputs {
                json: Some(json.clone()),
                ..Outputs::default()
            },
            stats: None,
            duration: None,
        };
        let Err(e) = run(&cfg, &Controls::default(), &mut |_: Event| {}) else {
            panic!("a meter over the limit ran");
        };
        assert!(matches!(e, SensorError::MeterConfig(_)), "{e:?}");
        assert!(
            e.to_string().contains("is 16777215 flows per worker"),
            "{e}"
        );
        assert!(!json.exists());
    }
}
