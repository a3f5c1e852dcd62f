//! The two drivers: [`to_file`] writes a source's packets with their planned times as
//! timestamps; [`to_ring`] sends them through a [`TxRing`](crate::TxRing) or an AF_XDP socket
//! (any [`Transmit`]) when their time comes, in batches
//! (every packet already due, up to `batch`, goes out with one `send()`).
//!
//! Pacing: the driver sleeps until shortly before a packet is due, then spins; packets that are
//! late (the sender could not keep up) are sent at once, all in one batch, so the average rate
//! holds even when single packets cannot be placed exactly.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use weir_packet::PacketMeta;
use weir_pcap::{FileFormat, Interface, PacketWriter};

use crate::source::Source;
use crate::tx::Transmit;
use crate::GenError;

pub use crate::report::Report;

/// Wall-clock time, ns since the Unix epoch.
#[inline]
pub fn realtime_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// Writes every packet of `src` to `out` in `format`, timestamped `start_ns` + its planned time.
/// The source must be paced (top speed has no planned times).
pub fn to_file<W: Write>(
    src: &mut dyn Source,
    out: W,
    format: FileFormat,
    start_ns: u64,
) -> Result<(Report, W), GenError> {
    if !src.paced() {
        return Err(GenError::Config(
            "a file needs planned times: give a rate (pps, Mbps) or replay at the recorded pace"
                .into(),
        ));
    }
    let spec = Interface::new(src.link(), 0);
    let mut w = PacketWriter::new(out, format, &[spec])?;
    let mut buf = vec![0u8; src.max_len()];
    let mut rep = Report::default();
    let mut last = 0;
    while let Some(due) = src.next_due()? {
        let ts = start_ns + due;
        let len = src.fill(&mut buf, ts)?;
        let meta = PacketMeta {
            ts_ns: ts,
            orig_len: len as u32,
            interface: 0,
        };
        w.write(&meta, &buf[..len])?;
        rep.sent += 1;
        rep.bytes += len as u64;
        last = due;
    }
    rep.queued = rep.sent;
    rep.queued_bytes = rep.bytes;
    rep.elapsed_ns = last;
    Ok((rep, w.finish()?))
}

/// Settings of [`to_ring`].
#[derive(Clone, Copy, Debug)]
pub struct SendOptions {
    /// Most frames per `send()`.
    pub batch: usize,
    /// Stop after this long (wall clock), whatever the source plans.
    pub duration: Option<Duration>,
}

impl Default for SendOptions {
    fn default() -> Self {
        SendOptions {
            batch: 256,
            duration: None,
        }
    }
}

/// Sleeps then spins until `deadline`, unless `stop` is raised; returns false when stopped.
fn wait_until(deadline: Instant, stop: &AtomicBool) -> bool {
    loop {
        if stop.load(Ordering::Relaxed) {
            return false;
        }
        let now = Instant::now();
        if now >= deadline {
            return true;
        }
        let left = deadline - now;
        if left > Duration::from_micros(300) {
            std::thread::sleep((left - Duration::from_micros(200)).min(Duration::from_millis(50)));
        } else {
            std::hint::spin_loop();
        }
    }
}

/// Sends every packet of `src` through `ring`, each when its planned time comes (at once for an
/// unpaced source), until the source ends, the duration passes or `stop` is raised.
pub fn to_ring<T: Transmit>(
    src: &mut dyn Source,
    ring: &mut T,
    opts: SendOptions,
    stop: &AtomicBool,
) -> Result<Report, GenError> {
    if src.max_len() > ring.max_frame() {
        return Err(GenError::Config(format!(
            "frames of up to {} bytes do not fit the interface (MTU) or the ring slots ({} bytes)",
            src.max_len(),
            ring.max_frame()
        )));
    }
    let paced = src.paced();
    let batch = opts.batch.clamp(1, ring.slots());
    let start = Instant::now();
    let end = opts.duration.map(|d| start + d);
    let before = ring.stats();
    let mut rep = Report::default();
    let mut first: Option<Instant> = None;
    let mut done = false;
    while !done {
        let Some(due) = src.next_due()? else { break };
        let due_at = start + Duration::from_nanos(due);
        if paced && !wait_until(due_at, stop) {
            break;
        }
        // One batch: this packet and every further one already due. Paced packets are stamped
        // one by one; at top speed a batch (a few µs) shares its start time, which saves a clock
        // read per packet.
        let mut n = 0;
        let batch_ns = realtime_ns();
        loop {
            let now = if paced { realtime_ns() } else { batch_ns };
            let filled = ring.push(|buf| src.fill(buf, now))?;
            match filled {
                Some(len) => {
                    first.get_or_insert_with(Instant::now);
                    rep.queued += 1;
                    rep.queued_bytes += len as u64;
                    n += 1;
                }
                None => {
                    ring.wait(100);
                    continue;
                }
            }
            if n >= batch {
                break;
            }
            if (rep.queued & 63) == 0
                && (stop.load(Ordering::Relaxed) || end.is_some_and(|e| Instant::now() >= e))
            {
                done = true;
                break;
            }
            match src.next_due()? {
                None => {
                    done = true;
                    break;
                }
                Some(d) if paced && start + Duration::from_nanos(d) > Instant::now() => break,
                Some(_) => {}
            }
        }
        ring.flush();
        if stop.load(Ordering::Relaxed) || end.is_some_and(|e| Instant::now() >= e) {
            break;
        }
    }
    ring.drain();
    let st = ring.stats();
    rep.rejected = st.rejected - before.rejected;
    rep.send_errors = st.send_errors - before.send_errors;
    rep.batches = st.sends - before.sends;
    rep.last_error = ring.last_error().map(|e| e.to_string());
    rep.unsent = st.unsent;
    // Only what the kernel took counts as sent, in packets and in bytes.
    rep.sent = rep.queued.saturating_sub(rep.rejected + rep.unsent);
    rep.bytes = rep
        .queued_bytes
        .saturating_sub((st.rejected_bytes - before.rejected_bytes) + st.unsent_bytes);
    rep.elapsed_ns = first.map_or(0, |f| f.elapsed().as_nanos() as u64);
    Ok(rep)
}
