//! The loop every offline command shares: open each input (file or stdin), run the BPF filter
//! compiled for each interface's link type ([`FilterSet`]), hand matching packets to the command,
//! and turn damage into a warning plus a `Damaged` status instead of an abort. One large classic
//! pcap file is read on every core ([`weir_pcap::parallel`]).
//!
//! With `--rules FILE` ([`for_each_ruled`]), the rule engine (weir-rules) decides every packet
//! the filter passed, in file order (the parallel reader hands packets over in order): a dropped
//! or sampled-out packet never reaches the command, a sliced one reaches it cut (its wire length
//! unchanged), and a tag comes with it ([`Visitor::ruled`]). A summary of the rules' counters
//! ends the run on stderr.

use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use weir_filter::{Filter, FilterSet};
use weir_packet::LinkType;
use weir_pcap::parallel::Plan;
use weir_pcap::{FileReader, Interface, Packet, ReadError};
use weir_rules::{Engine, Evaluator, Match, Outcome, RuleSet, RuleStats, Tag};

use crate::args::RulesArgs;
use crate::output::{warn_damage, Status};
use crate::progress::Progress;

/// A parallel read of `path` in ranges of about `range_bytes`, or `None` when the file does not
/// qualify ([`Plan::new`]). `WEIR_PARALLEL_MIN_BYTES` lowers the size threshold, so tests can
/// exercise this path on small files (and a huge value keeps it off).
pub(crate) fn parallel_plan(path: &Path, range_bytes: u64) -> Option<Plan> {
    let min = std::env::var("WEIR_PARALLEL_MIN_BYTES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(Plan::MIN_BYTES);
    Plan::new(path, range_bytes, min)
}

/// What a command is told about each input as it goes.
pub(crate) trait Visitor {
    /// A new input was opened.
    fn start_file(&mut self, _reader: &FileReader) -> Result<()> {
        Ok(())
    }
    /// A packet passed the filter. `interfaces` are the current input's interfaces so far.
    fn packet(&mut self, interfaces: &[Interface], packet: &Packet<'_>) -> Result<()>;
    /// A packet passed the filter and the rules (sliced if they said so), with the tag a rule
    /// gave it. By default the tag is ignored.
    fn ruled(
        &mut self,
        interfaces: &[Interface],
        packet: &Packet<'_>,
        _tag: Option<&Tag>,
    ) -> Result<()> {
        self.packet(interfaces, packet)
    }
    /// The input ended; `damage` is set when it ended early.
    fn end_file(&mut self, _reader: &FileReader, _damage: Option<&ReadError>) -> Result<()> {
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

/// Runs `visitor` over every matching packet of every input in order.
pub(crate) fn for_each_packet<V: Visitor>(
    inputs: &[PathBuf],
    filters: &mut FilterSet,
    visitor: &mut V,
) -> Result<Status> {
    if let ([single], true) = (inputs, visitor.parallel_read()) {
        if let Some(status) = parallel_one_file(single, filters, visitor)? {
            return Ok(status);
        }
    }
    let mut status = Status::Clean;
    for path in inputs {
        if visitor.done() {
            break;
        }
        let mut reader = match FileReader::open(path) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("weir: error: {e}");
                status = Status::Damaged;
                continue;
            }
        };
        if one_file(path, &mut reader, filters, visitor)? == Status::Damaged {
            status = Status::Damaged;
        }
    }
    Ok(status)
}

fn one_file<V: Visitor>(
    path: &Path,
    reader: &mut FileReader,
    filters: &mut FilterSet,
    visitor: &mut V,
) -> Result<Status> {
    visitor.start_file(reader)?;
    let progress = Progress::for_file(path);
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
            );
            interfaces = reader.interfaces().to_vec();
            if !match_all {
                per_iface = filters.for_interfaces(&interfaces)?;
            }
            let packet = Packet {
                meta: p.0,
                link: p.1,
                data: &p.2,
                record_offset: p.3,
                pcap_ts: p.4,
            };
            if match_all || per_iface[iface].matches(packet.data, packet.meta.orig_len) {
                visitor.packet(&interfaces, &packet)?;
            }
        } else if match_all || per_iface[iface].matches(packet.data, packet.meta.orig_len) {
            visitor.packet(&interfaces, &packet)?;
        }
        progress.tick(reader.packets(), reader.offset());
        if visitor.done() {
            break;
        }
    }
    progress.finish();
    if let Some(e) = &damage {
        warn_damage(e);
    }
    visitor.end_file(reader, damage.as_ref())?;
    Ok(if damage.is_some() {
        Status::Damaged
    } else {
        Status::Clean
    })
}

/// Reads one large classic pcap file with every core ([`Plan::for_each`]): the reading threads
/// filter byte ranges into lists of matching record offsets, and this thread replays them in
/// file order into the visitor. Returns `None` when the input does not qualify.
fn parallel_one_file<V: Visitor>(
    path: &Path,
    filters: &mut FilterSet,
    visitor: &mut V,
) -> Result<Option<Status>> {
    let Some(plan) = parallel_plan(path, Plan::RANGE_BYTES) else {
        return Ok(None);
    };
    let interfaces = plan.interfaces().to_vec();
    let filter = if filters.is_empty() {
        None
    } else {
        Some(filters.for_interface(&interfaces[0])?.clone())
    };
    visitor.start_file(plan.reader())?;
    let progress = Progress::for_file(path);
    let mut replayed = 0u64;
    let outcome = plan.for_each(
        |p| matches(filter.as_ref(), p),
        |p| p.record_offset,
        |offset, reader| {
            let mut replay = || -> Result<()> {
                reader.seek(offset)?;
                let p = reader
                    .next_packet()?
                    .expect("a record read once reads again");
                visitor.packet(&interfaces, &p)
            };
            if let Err(e) = replay() {
                return ControlFlow::Break(Err(e));
            }
            replayed += 1;
            progress.tick(replayed, offset);
            if visitor.done() {
                ControlFlow::Break(Ok(()))
            } else {
                ControlFlow::Continue(())
            }
        },
    )?;
    if let Some(Err(e)) = outcome.stopped {
        return Err(e);
    }
    progress.finish();
    tracing::debug!("{} packets read, {replayed} matched", outcome.packets);
    if let Some(e) = &outcome.damage {
        warn_damage(e);
    }
    visitor.end_file(&outcome.reader, outcome.damage.as_ref())?;
    Ok(Some(if outcome.damage.is_some() {
        Status::Damaged
    } else {
        Status::Clean
    }))
}

/// Whether `filter` (none: every packet) accepts `p`.
#[inline]
pub(crate) fn matches(filter: Option<&Filter>, p: &Packet<'_>) -> bool {
    filter.is_none_or(|f| f.matches(p.data, p.meta.orig_len))
}

/// The rules of one run (`--rules FILE`): the engine, built for the link type of the first
/// packet's interface, and one evaluator (packets are decided in file order, on one thread).
pub(crate) struct Rules {
    path: PathBuf,
    /// The parsed set, until the engine is built.
    set: Option<RuleSet>,
    /// True when the set has `bpf` matches, compiled for one link type.
    has_bpf: bool,
    engine: Option<(Engine, Evaluator, LinkType)>,
    /// Time spent reading and parsing the file, then compiling the set.
    parse: Duration,
    compile: Duration,
    rules: usize,
}

impl Rules {
    /// Reads and parses the rule file of `args`, if any (errors name the file, line and column).
    pub(crate) fn open(args: &RulesArgs) -> Result<Option<Rules>> {
        let Some(path) = &args.rules else {
            return Ok(None);
        };
        let start = Instant::now();
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read the rule file {}", path.display()))?;
        let set = RuleSet::parse(&text).with_context(|| format!("rules {}", path.display()))?;
        let has_bpf = set
            .rules
            .iter()
            .any(|r| matches!(&r.matcher, Match::Wild(m) if m.bpf.is_some()));
        Ok(Some(Rules {
            path: path.clone(),
            rules: set.rules.len(),
            set: Some(set),
            has_bpf,
            engine: None,
            parse: start.elapsed(),
            compile: Duration::ZERO,
        }))
    }

    /// Builds the engine for packets of `iface` (compiles the set's BPF matches for its link).
    fn build(&mut self, iface: &Interface) -> Result<()> {
        let set = self.set.take().expect("the set is compiled once");
        let start = Instant::now();
        let engine = Engine::new(set, iface.link, iface.snaplen)
            .with_context(|| format!("rules {}", self.path.display()))?;
        let ev = engine.evaluator();
        self.compile = start.elapsed();
        self.engine = Some((engine, ev, iface.link));
        Ok(())
    }

    /// Decides `packet`: `None` when it is dropped or sampled out, else the bytes to keep and
    /// the tag.
    #[inline]
    fn decide(
        &mut self,
        interfaces: &[Interface],
        packet: &Packet<'_>,
    ) -> Result<Option<(usize, Option<Tag>)>> {
        if self.engine.is_none() {
            self.build(&interfaces[packet.meta.interface as usize])?;
        }
        let (_, ev, link) = self.engine.as_mut().expect("engine built");
        if packet.link != *link && self.has_bpf {
            bail!(
                "rules {}: `bpf` matches are compiled for {} but a packet is {}: \
                 give inputs of one link type",
                self.path.display(),
                link,
                packet.link
            );
        }
        let f = weir_rules::fields(packet.link, packet.data, packet.meta.orig_len);
        let d = ev.eval(&f, packet.data);
        Ok(match d.outcome {
            Outcome::Passed | Outcome::Sliced => Some((d.keep as usize, d.tag)),
            Outcome::Dropped | Outcome::SampledOut => None,
        })
    }

    /// The summary of the run on stderr: totals, then each rule that matched (wildcard rules by
    /// id, exact rules summed); warns if a counter identity fails (it never should).
    pub(crate) fn summary(&self) {
        let Some((engine, _, _)) = &self.engine else {
            eprintln!("rules: no packet reached the rules");
            return;
        };
        let s = engine.stats();
        let t = &s.totals;
        eprintln!(
            "rules: {} packets in ({} bytes): {} passed, {} dropped, {} sliced, {} sampled out; \
             {} matched no rule",
            t.packets_in, t.bytes_in, t.passed, t.dropped, t.sliced, t.sampled_out, t.unmatched
        );
        eprintln!(
            "rules: {}: {} rules ({} exact), read and parsed in {} ms, compiled in {} ms",
            self.path.display(),
            self.rules,
            s.exact_rules,
            self.parse.as_millis(),
            self.compile.as_millis()
        );
        if t.cut != 0 || t.cut_bytes != 0 || t.learned != 0 || t.scanned_bytes != 0 {
            eprintln!(
                "rules: cutoffs cut {} packets and {} bytes; {} flows learnt; {} payload bytes \
                 scanned ({} stream restarts); {} flows evicted",
                t.cut, t.cut_bytes, t.learned, t.scanned_bytes, t.stream_resets, t.flow_evictions
            );
        }
        let line = |name: &str, r: &RuleStats| {
            eprintln!(
                "  {name}: {} packets, {} bytes: {} passed, {} dropped, {} sliced, {} sampled out",
                r.packets, r.bytes, r.passed, r.dropped, r.sliced, r.sampled_out
            );
        };
        if s.exact_rules > 0 {
            line(&format!("{} exact rules", s.exact_rules), &s.exact);
        }
        let mut ok = t.reconciles() && s.exact.reconciles();
        for w in &s.wild {
            ok &= w.stats.reconciles();
            if w.stats.packets > 0 {
                line(&format!("rule {} (line {})", w.id, w.line), &w.stats);
            }
        }
        if !ok {
            eprintln!("weir: warning: the rule counters do not add up (a bug: please report it)");
        }
    }
}

/// A visitor behind the rules: the packets they keep, cut to what they keep, with their tags.
struct Ruled<'a, V: Visitor> {
    rules: &'a mut Rules,
    inner: &'a mut V,
}

impl<V: Visitor> Visitor for Ruled<'_, V> {
    fn start_file(&mut self, reader: &FileReader) -> Result<()> {
        if self.rules.engine.is_none() {
            if let Some(i) = reader.interfaces().first() {
                self.rules.build(i)?;
            }
        }
        self.inner.start_file(reader)
    }

    #[inline]
    fn packet(&mut self, interfaces: &[Interface], packet: &Packet<'_>) -> Result<()> {
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
            };
            return self.inner.ruled(interfaces, &cut, tag.as_ref());
        }
        self.inner.ruled(interfaces, packet, tag.as_ref())
    }

    fn end_file(&mut self, reader: &FileReader, damage: Option<&ReadError>) -> Result<()> {
        self.inner.end_file(reader, damage)
    }

    fn done(&self) -> bool {
        self.inner.done()
    }

    fn parallel_read(&self) -> bool {
        self.inner.parallel_read()
    }
}

/// [`for_each_packet`] with the rules of `rules` (none: the same as [`for_each_packet`]) applied
/// after the filter, and their summary printed at the end.
pub(crate) fn for_each_ruled<V: Visitor>(
    inputs: &[PathBuf],
    filters: &mut FilterSet,
    rules: Option<&mut Rules>,
    visitor: &mut V,
) -> Result<Status> {
    let Some(rules) = rules else {
        return for_each_packet(inputs, filters, visitor);
    };
    let status = for_each_packet(
        inputs,
        filters,
        &mut Ruled {
            rules: &mut *rules,
            inner: visitor,
        },
    )?;
    rules.summary();
    Ok(status)
}

/// [`for_each_ruled`] with the rule file of `args` (what a command that flattens
/// [`RulesArgs`] calls in place of [`for_each_packet`]).
pub(crate) fn for_each_packet_with(
    inputs: &[PathBuf],
    filters: &mut FilterSet,
    args: &RulesArgs,
    visitor: &mut impl Visitor,
) -> Result<Status> {
    let mut rules = Rules::open(args)?;
    for_each_ruled(inputs, filters, rules.as_mut(), visitor)
}
