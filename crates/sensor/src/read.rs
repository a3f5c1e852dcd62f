//! The read job: the loop every offline command shares (`weir read`, `decode`, `info`, `flows
//! -r`). It opens each input (file or stdin), runs the BPF filter compiled for each interface's
//! link type ([`FilterSet`]), hands matching packets to a [`Visitor`], and turns damage into a
//! warning plus a damaged report instead of an abort. One large classic pcap file is read on
//! every core ([`weir_pcap::parallel`]).
//!
//! With rules ([`ReadConfig::rules`]), the rule engine (weir-rules) decides every packet the
//! filter passed, in file order (the parallel reader hands packets over in order): a dropped or
//! sampled-out packet never reaches the visitor, a sliced one reaches it cut (its wire length
//! unchanged), and a tag comes with it ([`Visitor::ruled`]). The rule file is loaded
//! ([`weir_rules::file::load`]) and compiled for the link type of the first input's first
//! interface; the report's summary is the live jobs' ([`RulesFile::summary`]).

use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use weir_filter::{Filter, FilterSet};
use weir_packet::LinkType;
use weir_pcap::parallel::Plan;
use weir_pcap::{FileReader, Interface, Packet, PacketOptions, ReadError};
use weir_rules::{Evaluator, Match, Outcome, RuleSet, RulesFile, Tag};

use crate::{Event, SensorError};

/// Packets between two progress reports ([`Observer::progress`]).
pub const PROGRESS_EVERY: u64 = 1 << 16;

/// What a command is told about each input as it goes.
pub trait Visitor {
    /// The visitor's errors; the loop's own errors convert into them.
    type Error: From<SensorError>;
    /// A new input was opened.
    fn start_file(&mut self, _reader: &FileReader) -> Result<(), Self::Error> {
        Ok(())
    }
    /// A packet passed the filter. `interfaces` are the current input's interfaces so far.
    fn packet(&mut self, interfaces: &[Interface], packet: &Packet<'_>) -> Result<(), Self::Error>;
    /// A packet passed the filter and the rules (sliced if they said so), with the tag a rule
    /// gave it. By default the tag is ignored.
    fn ruled(
        &mut self,
        interfaces: &[Interface],
        packet: &Packet<'_>,
        _tag: Option<&Tag>,
    ) -> Result<(), Self::Error> {
        self.packet(interfaces, packet)
    }
    /// The input ended; `damage` is set when it ended early.
    fn end_file(
        &mut self,
        _reader: &FileReader,
        _damage: Option<&ReadError>,
    ) -> Result<(), Self::Error> {
        Ok(())
    }
    /// True when the command wants no more packets (a count was reached).
    fn done(&self) -> bool {
        false
    }
    /// False when the command has its own threads and wants one plain sequential read per file
    /// (the flow meter): the parallel split only pays for filtering, and competes for the cores.
    fn parallel_read(&self) -> bool {
        true
    }
}

/// What the loop tells its caller besides the packets: warnings (damage), inputs that did not
/// open, and its progress through each file (the CLI draws a bar on a terminal).
pub trait Observer {
    /// A notice or a warning (damage ends an input early: the loop goes on with the next).
    fn event(&mut self, e: Event);
    /// An input did not open; the loop goes on with the next (the CLI prints `weir: error:`).
    fn failed(&mut self, e: &ReadError) {
        self.event(Event::Warning(e.to_string()));
    }
    /// Reading `path` starts.
    fn start_file(&mut self, _path: &Path) {}
    /// `packets` packets were read and the reader is at byte `offset` (every
    /// [`PROGRESS_EVERY`] packets).
    fn progress(&mut self, _packets: u64, _offset: u64) {}
    /// Reading the file ended.
    fn end_file(&mut self) {}
}

/// Any closure taking events observes a read (without progress).
impl<F: FnMut(Event)> Observer for F {
    fn event(&mut self, e: Event) {
        self(e)
    }
}

/// What to read.
#[derive(Clone, Debug, Default)]
pub struct ReadConfig {
    /// The inputs, in order (`-` is stdin).
    pub files: Vec<PathBuf>,
    /// The filter expression (libpcap syntax; empty: every packet).
    pub filter: String,
    /// The rule file applied after the filter.
    pub rules: Option<PathBuf>,
    /// Whether the visitor stores the packets' tags (for the rules' summary).
    pub tags_stored: bool,
}

/// What a read did.
#[derive(Debug, Default)]
pub struct ReadReport {
    /// Some input could not be read entirely (every readable packet was still handed over).
    pub damaged: bool,
    /// The rules' summary lines, when there were rules ([`RulesFile::summary`], then the file's
    /// rule count and how long it took to read and compile).
    pub rules: Option<String>,
}

/// A parallel read of `path` in ranges of about `range_bytes`, or `None` when the file does not
/// qualify ([`Plan::new`]). `WEIR_PARALLEL_MIN_BYTES` lowers the size threshold, so tests can
/// exercise this path on small files (and a huge value keeps it off).
pub fn parallel_plan(path: &Path, range_bytes: u64) -> Option<Plan> {
    let min = std::env::var("WEIR_PARALLEL_MIN_BYTES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(Plan::MIN_BYTES);
    Plan::new(path, range_bytes, min)
}

/// Whether `filter` (none: every packet) accepts `p`.
#[inline]
pub fn matches(filter: Option<&Filter>, p: &Packet<'_>) -> bool {
    filter.is_none_or(|f| f.matches(p.data, p.meta.orig_len))
}

/// Runs `visitor` over every packet of `cfg`'s inputs that the filter and the rules keep, in
/// order.
pub fn run<V: Visitor>(
    cfg: &ReadConfig,
    visitor: &mut V,
    obs: &mut dyn Observer,
) -> Result<ReadReport, V::Error> {
    let mut filters = FilterSet::new(&cfg.filter).map_err(SensorError::from)?;
    let Some(path) = &cfg.rules else {
        let damaged = for_each_packet(&cfg.files, &mut filters, visitor, obs)?;
        return Ok(ReadReport {
            damaged,
            rules: None,
        });
    };
    let mut rules = Rules::open(path)?;
    let damaged = for_each_packet(
        &cfg.files,
        &mut filters,
        &mut Ruled {
            rules: &mut rules,
            inner: visitor,
        },
        obs,
    )?;
    Ok(ReadReport {
        damaged,
        rules: Some(rules.summary(cfg.tags_stored, obs)),
    })
}

/// Runs `visitor` over every packet of `inputs` that `filters` pass, in order; true when an
/// input was damaged or did not open.
pub fn for_each_packet<V: Visitor>(
    inputs: &[PathBuf],
    filters: &mut FilterSet,
    visitor: &mut V,
    obs: &mut dyn Observer,
) -> Result<bool, V::Error> {
    if let ([single], true) = (inputs, visitor.parallel_read()) {
        if let Some(damaged) = parallel_one_file(single, filters, visitor, obs)? {
            return Ok(damaged);
        }
    }
    let mut damaged = false;
    for path in inputs {
        if visitor.done() {
            break;
        }
        let mut reader = match FileReader::open(path) {
            Ok(r) => r,
            Err(e) => {
                obs.failed(&e);
                damaged = true;
                continue;
            }
        };
        damaged |= one_file(path, &mut reader, filters, visitor, obs)?;
    }
    Ok(damaged)
}

fn one_file<V: Visitor>(
    path: &Path,
    reader: &mut FileReader,
    filters: &mut FilterSet,
    visitor: &mut V,
    obs: &mut dyn Observer,
) -> Result<bool, V::Error> {
    visitor.start_file(reader)?;
    obs.start_file(path);
    let match_all = filters.is_empty();
    let mut interfaces: Vec<Interface> = Vec::new();
    // Filters per interface index of this file, refreshed when new interfaces appear.
    let mut per_iface: Vec<Filter> = Vec::new();
    let mut damage = None;
    loop {
        let packet = match reader.next_packet() {
            Ok(Some(p)) => p,
            Ok(None) => break,
            Err(e) => {
                damage = Some(e);
                break;
            }
        };
        let iface = packet.meta.interface as usize;
        if iface >= interfaces.len() {
            // Only between packets can the interface list grow; copy what is new.
            // (The reader borrows itself for `packet`, so the list is cloned out lazily.)
            let p = (
                packet.meta,
                packet.link,
                packet.data.to_vec(),
                packet.record_offset,
                packet.pcap_ts,
                packet.options.raw().to_vec(),
                packet.options.big_endian(),
            );
            interfaces = reader.interfaces().to_vec();
            if !match_all {
                per_iface = filters
                    .for_interfaces(&interfaces)
                    .map_err(SensorError::from)?;
            }
            let packet = Packet {
                meta: p.0,
                link: p.1,
                data: &p.2,
                record_offset: p.3,
                pcap_ts: p.4,
                options: PacketOptions::from_raw(&p.5, p.6),
            };
            if match_all || per_iface[iface].matches(packet.data, packet.meta.orig_len) {
                visitor.packet(&interfaces, &packet)?;
            }
        } else if match_all || per_iface[iface].matches(packet.data, packet.meta.orig_len) {
            visitor.packet(&interfaces, &packet)?;
        }
        let n = reader.packets();
        if n % PROGRESS_EVERY == 0 {
            obs.progress(n, reader.offset());
        }
        if visitor.done() {
            break;
        }
    }
    obs.end_file();
    if reader.damaged_options() > 0 {
        obs.event(Event::Warning(format!(
            "{}: {} packets have a damaged option list (an option runs past its block); \
             they were read with the options before the damage",
            path.display(),
            reader.damaged_options()
        )));
    }
    if let Some(e) = &damage {
        obs.event(Event::Warning(e.to_string()));
    }
    visitor.end_file(reader, damage.as_ref())?;
    Ok(damage.is_some())
}

/// Reads one large classic pcap file with every core ([`Plan::for_each`]): the reading threads
/// filter byte ranges into lists of matching record offsets, and this thread replays them in
/// file order into the visitor. Returns `None` when the input does not qualify.
fn parallel_one_file<V: Visitor>(
    path: &Path,
    filters: &mut FilterSet,
    visitor: &mut V,
    obs: &mut dyn Observer,
) -> Result<Option<bool>, V::Error> {
    let Some(plan) = parallel_plan(path, Plan::RANGE_BYTES) else {
        return Ok(None);
    };
    let interfaces = plan.interfaces().to_vec();
    let filter = if filters.is_empty() {
        None
    } else {
        Some(
            filters
                .for_interface(&interfaces[0])
                .map_err(SensorError::from)?
                .clone(),
        )
    };
    visitor.start_file(plan.reader())?;
    obs.start_file(path);
    let mut replayed = 0u64;
    let outcome = plan
        .for_each(
            |p| matches(filter.as_ref(), p),
            |p| p.record_offset,
            |offset, reader| {
                let mut replay = || -> Result<(), V::Error> {
                    reader.seek(offset).map_err(SensorError::from)?;
                    let p = reader
                        .next_packet()
                        .map_err(SensorError::from)?
                        .expect("a record read once reads again");
                    visitor.packet(&interfaces, &p)
                };
                if let Err(e) = replay() {
                    return ControlFlow::Break(Err(e));
                }
                replayed += 1;
                if replayed % PROGRESS_EVERY == 0 {
                    obs.progress(replayed, offset);
                }
                if visitor.done() {
                    ControlFlow::Break(Ok(()))
                } else {
                    ControlFlow::Continue(())
                }
            },
        )
        .map_err(SensorError::from)?;
    if let Some(Err(e)) = outcome.stopped {
        return Err(e);
    }
    obs.end_file();
    tracing::debug!("{} packets read, {replayed} matched", outcome.packets);
    if let Some(e) = &outcome.damage {
        obs.event(Event::Warning(e.to_string()));
    }
    visitor.end_file(&outcome.reader, outcome.damage.as_ref())?;
    Ok(Some(outcome.damage.is_some()))
}

/// The rules of one read: the file, its engine built for the link type of the first packet's
/// interface, and one evaluator (packets are decided in file order, on one thread).
struct Rules {
    path: PathBuf,
    /// The parsed set, until the engine is built.
    set: Option<RuleSet>,
    /// True when the set has `bpf` matches, compiled for one link type.
    has_bpf: bool,
    engine: Option<(RulesFile, Evaluator, LinkType)>,
    /// Time spent reading and parsing the file, then compiling the set.
    parse: Duration,
    compile: Duration,
    /// Rules in the file.
    count: usize,
    /// Packets kept with a tag.
    tagged: u64,
}

impl Rules {
    /// Reads and parses the rule file (errors name the file, line and column).
    fn open(path: &Path) -> Result<Rules, SensorError> {
        let start = Instant::now();
        let set = weir_rules::file::load(path)?;
        let has_bpf = set
            .rules
            .iter()
            .any(|r| matches!(&r.matcher, Match::Wild(m) if m.bpf.is_some()));
        Ok(Rules {
            path: path.to_path_buf(),
            count: set.rules.len(),
            set: Some(set),
            has_bpf,
            engine: None,
            parse: start.elapsed(),
            compile: Duration::ZERO,
            tagged: 0,
        })
    }

    /// Builds the engine for packets of `iface` (compiles the set's BPF matches for its link).
    fn build(&mut self, iface: &Interface) -> Result<(), SensorError> {
        let set = self.set.take().expect("the set is compiled once");
        let start = Instant::now();
        let engine = crate::rules::compile(set, iface.link, iface.snaplen, &self.path)?;
        let ev = engine.evaluator();
        self.compile = start.elapsed();
        self.engine = Some((RulesFile::new(&self.path, engine), ev, iface.link));
        Ok(())
    }

    /// Decides `packet`: `None` when it is dropped or sampled out, else the bytes to keep and
    /// the tag.
    #[inline]
    fn decide(
        &mut self,
        interfaces: &[Interface],
        packet: &Packet<'_>,
    ) -> Result<Option<(usize, Option<Tag>)>, SensorError> {
        if self.engine.is_none() {
            self.build(&interfaces[packet.meta.interface as usize])?;
        }
        let (_, ev, link) = self.engine.as_mut().expect("engine built");
        if packet.link != *link && self.has_bpf {
            return Err(SensorError::Rules {
                path: self.path.clone(),
                message: format!(
                    "`bpf` matches are compiled for {} but a packet is {}: give inputs of one \
                     link type",
                    link, packet.link
                ),
            });
        }
        let f = weir_rules::fields(packet.link, packet.data, packet.meta.orig_len);
        let d = ev.eval(&f, packet.data);
        Ok(match d.outcome {
            Outcome::Passed | Outcome::Sliced => {
                self.tagged += u64::from(d.tag.is_some());
                Some((d.keep as usize, d.tag))
            }
            Outcome::Dropped | Outcome::SampledOut => None,
        })
    }

    /// The summary of the read: the live jobs' lines ([`RulesFile::summary`]), then the file's
    /// rule count and timings; warns (`obs`) if a counter identity fails (it never should).
    fn summary(&self, tags_stored: bool, obs: &mut dyn Observer) -> String {
        let Some((file, _, _)) = &self.engine else {
            return format!(
                "  rules: no packet reached the rules of {}",
                self.path.display()
            );
        };
        let s = file.engine().stats();
        let mut ok = s.totals.reconciles() && s.exact.reconciles();
        for w in &s.wild {
            ok &= w.stats.reconciles();
        }
        if !ok {
            obs.event(Event::Warning(
                "the rule counters do not add up (a bug: please report it)".into(),
            ));
        }
        format!(
            "{}\n  rules file {}: {} rules ({} exact), read and parsed in {} ms, compiled in {} \
             ms",
            file.summary(self.tagged, tags_stored),
            self.path.display(),
            self.count,
            s.exact_rules,
            self.parse.as_millis(),
            self.compile.as_millis()
        )
    }
}

/// A visitor behind the rules: the packets they keep, cut to what they keep, with their tags.
struct Ruled<'a, V: Visitor> {
    rules: &'a mut Rules,
    inner: &'a mut V,
}

impl<V: Visitor> Visitor for Ruled<'_, V> {
    type Error = V::Error;

    fn start_file(&mut self, reader: &FileReader) -> Result<(), V::Error> {
        if self.rules.engine.is_none() {
            if let Some(i) = reader.interfaces().first() {
                self.rules.build(i)?;
            }
        }
        self.inner.start_file(reader)
    }

    #[inline]
    fn packet(&mut self, interfaces: &[Interface], packet: &Packet<'_>) -> Result<(), V::Error> {
        let Some((keep, tag)) = self.rules.decide(interfaces, packet)? else {
            return Ok(());
        };
        if keep < packet.data.len() {
            let cut = Packet {
                meta: packet.meta,
                link: packet.link,
                data: &packet.data[..keep],
                record_offset: packet.record_offset,
                pcap_ts: packet.pcap_ts,
                options: packet.options,
            };
            return self.inner.ruled(interfaces, &cut, tag.as_ref());
        }
        self.inner.ruled(interfaces, packet, tag.as_ref())
    }

    fn end_file(
        &mut self,
        reader: &FileReader,
        damage: Option<&ReadError>,
    ) -> Result<(), V::Error> {
        self.inner.end_file(reader, damage)
    }

    fn done(&self) -> bool {
        self.inner.done()
    }

    fn parallel_read(&self) -> bool {
        self.inner.parallel_read()
    }
}
