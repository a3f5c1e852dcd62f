//! The loop every offline command shares: open each input (file or stdin), run the BPF filter
//! compiled for each interface's link type ([`FilterSet`]), hand matching packets to the command,
//! and turn damage into a warning plus a `Damaged` status instead of an abort. One large classic
//! pcap file is read on every core ([`weir_pcap::parallel`]).

use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

use anyhow::Result;
use weir_filter::{Filter, FilterSet};
use weir_pcap::parallel::Plan;
use weir_pcap::{FileReader, Interface, Packet, ReadError};

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
