//! The file import feed: a thread copies capture files, in turn, into a new packet buffer, as
//! a capture thread would copy a ring, so the buffer's consumers (the recorder, the flow meter)
//! take files and live traffic alike. Unlike capture it waits (never drops) when the buffer is
//! full: importing is lossless. With rules ([`Import::start_with_rules`]) every packet is
//! decided as a capture thread decides it (dropped, kept whole, cut, tagged), on the one thread.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use weir_buffer::{Dropped, PacketBuffer};
use weir_decode::Decoded;
use weir_packet::{LinkType, PacketMeta};
use weir_pcap::{FileReader, Interface};
use weir_rules::{Engine, Outcome, RuleSet};

use crate::{CaptureError, Totals};

/// How long the import thread sleeps when the buffer is full.
const FULL_WAIT: Duration = Duration::from_micros(50);

/// A running import of capture files into a packet buffer.
pub struct Import {
    thread: JoinHandle<Result<Totals, CaptureError>>,
    buffer: PacketBuffer,
    interfaces: Vec<Interface>,
    done: Arc<AtomicBool>,
    engine: Option<Engine>,
}

impl Import {
    /// Makes a buffer of `buffer_bytes` with `readers` registered and `best_effort` readers and
    /// starts the thread that copies `first` (already open, so stdin is read once) and then the
    /// files `rest`, opened in turn. The records carry the interface ids of the files (an id
    /// the first file does not describe becomes 0). The thread ends early once `interrupted`
    /// is set (or [`finish`](Self::finish) is called).
    pub fn start(
        first: FileReader,
        rest: &[PathBuf],
        buffer_bytes: usize,
        readers: usize,
        best_effort: usize,
        interrupted: &Arc<AtomicBool>,
    ) -> Result<Import, CaptureError> {
        Import::start_with_rules(
            first,
            rest,
            buffer_bytes,
            readers,
            best_effort,
            interrupted,
            None,
        )
    }

    /// [`start`](Self::start), with a rule set applied to every packet: the engine is compiled
    /// for the first file's first interface's link type (see [`engine`](Self::engine)); with
    /// `store_tags`, tags become record comments (`weir-tag=TAG`), else they are only counted.
    pub fn start_with_rules(
        mut first: FileReader,
        rest: &[PathBuf],
        buffer_bytes: usize,
        readers: usize,
        best_effort: usize,
        interrupted: &Arc<AtomicBool>,
        rules: Option<(RuleSet, bool)>,
    ) -> Result<Import, CaptureError> {
        // A pcapng file describes its interfaces in blocks before its first packet: read it (and
        // keep it, to push first) so they are known.
        let pending = first.next_packet()?.map(|p| (p.meta, p.data.to_vec()));
        let interfaces: Vec<Interface> = first.interfaces().to_vec();
        let link = interfaces.first().map_or(LinkType::ETHERNET, |i| i.link);
        let (engine, store_tags) = match rules {
            Some((set, store)) => (Some(Engine::new(set, link, 262_144)?), store),
            None => (None, false),
        };
        let mut evaluator = engine.as_ref().map(Engine::evaluator);
        let buffer = weir_buffer::Config::new(buffer_bytes)
            .readers(readers)
            .best_effort_readers(best_effort)
            .max_writers(1)
            .build()
            .map_err(CaptureError::Buffer)?;
        let mut writer = buffer.writer().map_err(CaptureError::BufferHandle)?;
        let done = Arc::new(AtomicBool::new(false));
        let (rest, stop, interrupted) = (rest.to_vec(), done.clone(), interrupted.clone());
        let n_ifaces = interfaces.len();
        let thread = std::thread::spawn(move || -> Result<Totals, CaptureError> {
            let mut t = Totals::default();
            let mut push = |meta: &PacketMeta, data: &[u8], t: &mut Totals| {
                let iface = if (meta.interface as usize) < n_ifaces {
                    meta.interface
                } else {
                    0
                };
                t.feed.received += 1;
                t.feed.wire_bytes += u64::from(meta.orig_len);
                let mut comment = [0u8; 32];
                let mut clen = 0;
                let mut data = data;
                if let Some(ev) = evaluator.as_mut() {
                    let mut scratch = Decoded::new();
                    let f = weir_rules::fields_from_frame(&mut scratch, link, data, meta.orig_len);
                    let d = ev.eval(&f, data);
                    match d.outcome {
                        Outcome::Dropped | Outcome::SampledOut => {
                            t.feed.rules_dropped += 1;
                            return;
                        }
                        Outcome::Sliced => t.feed.rules_sliced += 1,
                        Outcome::Passed => {}
                    }
                    data = &data[..(d.keep as usize).min(data.len())];
                    if let Some(tag) = d.tag {
                        t.feed.tagged += 1;
                        if store_tags {
                            clen = crate::tag_comment(&tag, &mut comment);
                        }
                    }
                }
                loop {
                    match writer.push_commented(
                        iface,
                        meta.ts_ns,
                        meta.orig_len,
                        data,
                        &comment[..clen],
                    ) {
                        Ok(()) => break,
                        Err(Dropped::Full) => std::thread::sleep(FULL_WAIT),
                        Err(Dropped::TooLong) => {
                            t.feed.too_long += 1;
                            break;
                        }
                    }
                }
                t.feed.pushed += 1;
                t.feed.pushed_bytes += data.len() as u64;
            };
            if let Some((meta, data)) = &pending {
                push(meta, data, &mut t);
            }
            let mut next = Some(first);
            let mut paths = rest.iter();
            loop {
                let mut r = match next.take() {
                    Some(r) => r,
                    None => match paths.next() {
                        Some(path) => {
                            FileReader::open(path).map_err(|source| CaptureError::Open {
                                path: path.clone(),
                                source,
                            })?
                        }
                        None => break,
                    },
                };
                while let Some(p) = r.next_packet()? {
                    if stop.load(Ordering::Relaxed) || interrupted.load(Ordering::Relaxed) {
                        return Ok(t);
                    }
                    push(&p.meta, p.data, &mut t);
                }
            }
            Ok(t)
        });
        Ok(Import {
            thread,
            buffer,
            interfaces,
            done,
            engine,
        })
    }

    /// The rule engine, when started with rules.
    pub fn engine(&self) -> Option<&Engine> {
        self.engine.as_ref()
    }

    /// The packet buffer the files go into.
    pub fn buffer(&self) -> &PacketBuffer {
        &self.buffer
    }

    /// The interfaces of the first file, in interface-id order.
    pub fn interfaces(&self) -> &[Interface] {
        &self.interfaces
    }

    /// Whether the thread has ended (every file copied, or an error).
    pub fn is_finished(&self) -> bool {
        self.thread.is_finished()
    }

    /// Stops the import after the packet being copied and waits for the thread: what it
    /// copied (`received`, `pushed`, their bytes, `too_long`), or its error.
    pub fn finish(self) -> Result<Totals, CaptureError> {
        self.done.store(true, Ordering::Relaxed);
        self.thread.join().expect("import thread panicked")
    }
}
