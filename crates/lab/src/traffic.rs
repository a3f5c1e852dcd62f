//! What a scenario runs inside the bench, in threads of this process moved into the namespaces
//! ([`netns`](crate::netns)): captures (weir-capture's live pipeline into a pcap file, as
//! `weir capture --format pcap -w FILE EXPR` does) and stamped streams sent through weir-gen's
//! TX ring (as `weir gen -i eth0 ...` does).

use std::fs::File;
use std::net::IpAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use weir_capture::{Pipeline, PipelineConfig};
use weir_gen::drive::{self, SendOptions};
use weir_gen::{FlowSpec, Proto, Rate, SizeMix, Synth, SynthConfig, TxConfig, TxRing};
use weir_packet::PacketMeta;
use weir_pcap::{FileFormat, PacketWriter, Precision};

use crate::netns::{spawn_in, Enter};
use crate::LabError;

/// How often an idle capture hands what it wrote to the file.
const IDLE_FLUSH: Duration = Duration::from_millis(50);

/// A job running in a thread inside a namespace until stopped (or its own end).
pub(crate) struct Job {
    what: &'static str,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Result<(), LabError>>>,
}

impl Job {
    /// Starts `body` in namespace `ns` and waits until it says it is ready (its first
    /// `ready.send`), or fails.
    fn start(
        what: &'static str,
        ns: &str,
        body: impl FnOnce(&AtomicBool, &mpsc::Sender<()>) -> Result<(), LabError> + Send + 'static,
    ) -> Result<Job, LabError> {
        let stop = Arc::new(AtomicBool::new(false));
        let (ready, started) = mpsc::channel();
        let flag = stop.clone();
        let thread = spawn_in(ns, Enter::WithSysfs, what, move || body(&flag, &ready))?;
        let mut job = Job {
            what,
            stop,
            thread: Some(thread),
        };
        if started.recv().is_err() {
            // The thread ended before it was ready: its error says why.
            let e = job.stop().err().unwrap_or_else(|| LabError::Command {
                cmd: what.into(),
                stderr: "ended before it was ready".into(),
            });
            return Err(e);
        }
        Ok(job)
    }

    /// Stops the job and waits for it; its error, if it had one.
    pub(crate) fn stop(&mut self) -> Result<(), LabError> {
        self.stop.store(true, Ordering::Relaxed);
        match self.thread.take().map(JoinHandle::join) {
            None => Ok(()),
            Some(Ok(r)) => r,
            Some(Err(_)) => Err(LabError::Command {
                cmd: self.what.into(),
                stderr: "panicked".into(),
            }),
        }
    }
}

impl Drop for Job {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

/// Captures what `filter` matches on `iface` of namespace `ns` into the classic pcap file
/// `file` (nanosecond timestamps) until stopped; returns once the capture runs.
pub(crate) fn capture(ns: &str, iface: &str, file: &Path, filter: &str) -> Result<Job, LabError> {
    let mut cfg = PipelineConfig::new(vec![iface.to_string()]);
    cfg.filter = filter.to_string();
    let file = file.to_path_buf();
    Job::start("weir capture", ns, move |stop, ready| {
        let failed = |e: &dyn std::fmt::Display| LabError::Command {
            cmd: "weir capture".into(),
            stderr: e.to_string(),
        };
        let mut pipeline = Pipeline::start(&cfg).map_err(|e| failed(&e))?;
        let out = File::create(&file).map_err(|e| LabError::Io {
            path: file.display().to_string(),
            source: e,
        })?;
        let format = FileFormat::Pcap(Precision::Nano);
        let mut w =
            PacketWriter::new(out, format, pipeline.interfaces()).map_err(|e| failed(&e))?;
        let mut reader = pipeline.buffer().reader(0).map_err(|e| failed(&e))?;
        let _ = ready.send(());
        write_until(&mut pipeline, &mut reader, &mut w, stop, &file).map_err(|e| failed(&e))?;
        w.finish().map_err(|e| failed(&e))?;
        Ok(())
    })
}

/// The capture's consumer: the buffer's records into the file until `stop`, then the rest
/// (the capture threads drain their rings first).
fn write_until(
    pipeline: &mut Pipeline,
    reader: &mut weir_buffer::Reader,
    w: &mut PacketWriter<File>,
    stop: &AtomicBool,
    file: &Path,
) -> Result<(), String> {
    let err = |e: &dyn std::fmt::Display| format!("{}: {e}", file.display());
    let mut stopping = false;
    let mut flushed = Instant::now();
    let mut unflushed = false;
    loop {
        match reader.next_batch() {
            Some(batch) => {
                for r in batch.records() {
                    let meta = PacketMeta {
                        ts_ns: r.ts_ns(),
                        orig_len: r.orig_len(),
                        interface: 0,
                    };
                    w.write(&meta, r.data()).map_err(|e| err(&e))?;
                }
                batch.release();
                unflushed = true;
            }
            // After the capture threads stopped, one empty look means everything is written.
            None if stopping => return Ok(()),
            None => {
                if unflushed && flushed.elapsed() >= IDLE_FLUSH {
                    w.flush().map_err(|e| err(&e))?;
                    flushed = Instant::now();
                    unflushed = false;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        if !stopping && (stop.load(Ordering::Relaxed) || pipeline.failed()) {
            pipeline.stop().map_err(|e| e.to_string())?;
            stopping = true;
        }
    }
}

/// A stamped UDP stream, as `weir gen -i eth0 --src .. --dst .. --src-mac .. --dst-mac ..
/// --dport .. --stream .. --size .. --tos .. (--pps | --mbps) .. --duration ..` sends it.
pub(crate) struct Stream {
    /// Source MAC (the sender's eth0).
    pub src_mac: [u8; 6],
    /// Destination MAC (the router's in0).
    pub dst_mac: [u8; 6],
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// Destination port (the source port is 40000).
    pub dport: u16,
    /// Stream id in the stamps.
    pub stream: u16,
    /// Frame size without FCS.
    pub size: usize,
    /// TOS byte.
    pub tos: u8,
    /// Rate.
    pub rate: Rate,
    /// Seconds of sending.
    pub duration: f64,
}

/// Starts sending `s` on `iface` of namespace `ns` (through the qdisc, 4096-slot ring,
/// batches of 256); returns once the ring is open and sending. `what` names it in errors.
pub(crate) fn send(what: &'static str, ns: &str, iface: &str, s: Stream) -> Result<Job, LabError> {
    let iface = iface.to_string();
    Job::start(what, ns, move |stop, ready| {
        let failed = |e: &dyn std::fmt::Display| LabError::Command {
            cmd: what.into(),
            stderr: e.to_string(),
        };
        let mut ring = TxRing::open(&iface, TxConfig::default()).map_err(|e| failed(&e))?;
        let mut src = Synth::new(SynthConfig {
            flows: vec![FlowSpec {
                src_mac: s.src_mac,
                dst_mac: s.dst_mac,
                vlan: None,
                src_ip: s.src,
                dst_ip: s.dst,
                src_port: 40_000,
                dst_port: s.dport,
                tos: s.tos,
                ttl: 64,
                proto: Proto::Udp,
            }],
            stream_base: s.stream,
            sizes: SizeMix::Fixed(s.size),
            seed: 1,
            rate: s.rate,
            count: None,
            duration_ns: Some((s.duration * 1e9) as u64),
        })
        .map_err(|e| failed(&e))?;
        let _ = ready.send(());
        let opts = SendOptions {
            batch: 256,
            duration: Some(Duration::from_secs_f64(s.duration)),
        };
        let r = drive::to_ring(&mut src, &mut ring, opts, stop).map_err(|e| failed(&e))?;
        if let Some(f) = r.failure() {
            return Err(failed(&f));
        }
        Ok(())
    })
}

impl Job {
    /// Waits for a job that ends by itself (a stream of a given duration); its error, if any.
    pub(crate) fn wait(mut self) -> Result<(), LabError> {
        match self.thread.take().map(JoinHandle::join) {
            None => Ok(()),
            Some(Ok(r)) => r,
            Some(Err(_)) => Err(LabError::Command {
                cmd: self.what.into(),
                stderr: "panicked".into(),
            }),
        }
    }
}
