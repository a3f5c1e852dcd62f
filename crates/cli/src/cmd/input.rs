//! The loop every offline command shares: open each input (file or stdin), run the BPF filter
//! compiled for each interface's link type, hand matching packets to the command, and turn damage
//! into a warning plus a `Damaged` status instead of an abort.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use weir_filter::Filter;
use weir_packet::LinkType;
use weir_pcap::{FileReader, Interface, Packet, ReadError};

use super::ordered::{self, Flow};
use crate::output::{warn_damage, Status};
use crate::progress::Progress;

/// The snap length libpcap would use when compiling a filter for this interface.
pub fn effective_snaplen(i: &Interface) -> u32 {
    weir_filter::effective_snaplen(i.snaplen)
}

/// A BPF expression compiled lazily once per (link type, snap length, byte order), as interfaces
/// appear: libpcap's code depends on all three, exactly as when tcpdump opens each file.
pub struct Filters {
    expr: String,
    compiled: HashMap<(LinkType, u32, bool), Filter>,
}

impl Filters {
    /// Joins the expression words like tcpdump does and checks it compiles for Ethernet, so a
    /// syntax error is reported before any input is opened.
    pub fn new(words: &[String]) -> Result<Filters> {
        let expr = words.join(" ");
        let f = Filters {
            expr,
            compiled: HashMap::new(),
        };
        if !f.expr.trim().is_empty() {
            let probe = Filter::compile(&f.expr, LinkType::ETHERNET, 0);
            // A link-specific error (e.g. "vlan" on raw IP) is only fatal for inputs of that link.
            if let Err(e) = probe {
                if !is_link_specific(&e.to_string()) {
                    return Err(e).context("invalid filter expression");
                }
            }
        }
        Ok(f)
    }

    /// True when the expression is empty (everything matches).
    pub fn is_empty(&self) -> bool {
        self.expr.trim().is_empty()
    }

    /// The filters of a file's interfaces, in interface-id order.
    pub fn for_interfaces(&mut self, interfaces: &[Interface]) -> Result<Vec<Filter>> {
        interfaces
            .iter()
            .map(|i| self.for_interface(i).cloned())
            .collect()
    }

    /// The filter for an interface, compiling it on first use.
    pub fn for_interface(&mut self, i: &Interface) -> Result<&Filter> {
        let key = (i.link, effective_snaplen(i), i.swapped);
        if !self.compiled.contains_key(&key) {
            let f = Filter::compile_for_file(&self.expr, key.0, key.1, key.2)
                .with_context(|| format!("cannot compile the filter for link type {}", key.0))?;
            self.compiled.insert(key, f);
        }
        Ok(&self.compiled[&key])
    }
}

/// Errors libpcap gives because the expression makes no sense for one link type.
fn is_link_specific(msg: &str) -> bool {
    msg.contains("not supported") || msg.contains("link-layer") || msg.contains("link type")
}

/// What a command is told about each input as it goes.
pub trait Visitor {
    /// A new input was opened.
    fn start_file(&mut self, _reader: &FileReader) -> Result<()> {
        Ok(())
    }
    /// A packet passed the filter. `interfaces` are the current input's interfaces so far.
    fn packet(&mut self, interfaces: &[Interface], packet: &Packet<'_>) -> Result<()>;
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
pub fn for_each_packet<V: Visitor>(
    inputs: &[PathBuf],
    filters: &mut Filters,
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
    filters: &mut Filters,
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

/// Reads one large classic pcap file with every core ([`ordered`](super::ordered)): workers
/// filter byte ranges into lists of matching record offsets, and this thread replays them in
/// file order into the visitor. Returns `None` when the input does not qualify.
fn parallel_one_file<V: Visitor>(
    path: &Path,
    filters: &mut Filters,
    visitor: &mut V,
) -> Result<Option<Status>> {
    let Some(plan) = ordered::plan(path) else {
        return Ok(None);
    };
    let interfaces = plan.interfaces.clone();
    let filter = if filters.is_empty() {
        None
    } else {
        Some(filters.for_interface(&interfaces[0])?.clone())
    };
    visitor.start_file(&plan.reader)?;
    let progress = Progress::for_file(path);
    let mut replayed = 0u64;
    let outcome = ordered::run(
        plan,
        filter.as_ref(),
        |p| p.record_offset,
        |offset, reader| {
            reader.seek(offset)?;
            let p = reader
                .next_packet()?
                .expect("a record read once reads again");
            visitor.packet(&interfaces, &p)?;
            replayed += 1;
            progress.tick(replayed, offset);
            Ok(if visitor.done() {
                Flow::Stop
            } else {
                Flow::Continue
            })
        },
    )?;
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
