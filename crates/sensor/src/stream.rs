//! Live streams (HPCAP's listeners): a filtered classic-pcap stream of the shared packet buffer
//! handed to another tool (tshark, tcpdump, Suricata or Zeek reading a pipe) while recording
//! goes on.
//!
//! A stream has two threads. Its **consumer** reads the buffer through its own cursor (a
//! best-effort reader beside a recorder, so writers skip it forward rather than wait for it),
//! runs its filter on each packet and copies the matching ones into a queue bounded in bytes;
//! it never waits for anything. Its **writer** takes packets from the queue and writes them to
//! the reader of the stream through a non-blocking descriptor. A reader that is slow, paused or
//! absent fills the queue, and the packets that find it full are **dropped and counted for that
//! stream**: capture and the recorder never wait for a stream.
//!
//! Every packet that matched a stream's filter is, at the end, either `written` (its last byte
//! was taken by the kernel for the reader) or `dropped` (queue full, no reader attached, or in
//! flight when the reader went away): `matched = written + dropped`, exactly. The bytes the
//! buffer skipped a stream's consumer over (best-effort readers, [`weir_buffer`]) are counted
//! apart, as the buffer's `skipped_bytes` of that reader: they were never filtered.
//!
//! Targets ([`Target`]): `-` (standard output; a reader that goes away ends the stream), a FIFO
//! that must exist (`mkfifo`; a reader may come and go, each one gets a pcap header and the
//! packets from then on, even when it opens the FIFO the instant the previous one closed: an
//! inotify watch queues every reader's close, see `FifoWatch`) and `unix:PATH`, a Unix stream socket the stream listens on (one
//! client at a time, each gets a pcap header; a path held by a live socket is refused, a stale
//! socket file is replaced).

use std::collections::VecDeque;
use std::io::{self, Write};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use weir_buffer::{Reader, Record};
use weir_filter::{Filter, FilterSet};
use weir_pcap::Interface;

use crate::SensorError;

/// Default bound of a stream's queue.
pub const DEFAULT_QUEUE_BYTES: usize = 4 << 20;

/// How long a stream's writer keeps handing queued packets to a reader that does not take them
/// once the stream is asked to stop; what is left then is counted as dropped, except the rest of
/// a packet the reader already has part of, which is still sent while the reader takes bytes
/// (no cut packet for a reader that stays).
pub const STOP_GRACE: Duration = Duration::from_millis(500);

/// Where a stream goes.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Target {
    /// Standard output (`-`).
    Stdout,
    /// A FIFO (named pipe) that exists.
    Fifo(PathBuf),
    /// A Unix stream socket the stream listens on (`unix:PATH`).
    Unix(PathBuf),
}

impl FromStr for Target {
    type Err = String;

    fn from_str(s: &str) -> Result<Target, String> {
        match s {
            "" => Err("empty stream target (give -, a FIFO or unix:PATH)".into()),
            "-" => Ok(Target::Stdout),
            _ => match s.strip_prefix("unix:") {
                Some("") => Err("unix: needs a socket path".into()),
                Some(p) => Ok(Target::Unix(PathBuf::from(p))),
                None => Ok(Target::Fifo(PathBuf::from(s))),
            },
        }
    }
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::Stdout => write!(f, "-"),
            Target::Fifo(p) => write!(f, "{}", p.display()),
            Target::Unix(p) => write!(f, "unix:{}", p.display()),
        }
    }
}

impl Target {
    /// The same target with a relative path taken from `dir`.
    pub fn relative_to(&self, dir: &Path) -> Target {
        match self {
            Target::Stdout => Target::Stdout,
            Target::Fifo(p) => Target::Fifo(dir.join(p)),
            Target::Unix(p) => Target::Unix(dir.join(p)),
        }
    }

    /// Checks the target can be served (without opening it for good): a FIFO exists and is
    /// one; a Unix socket path is not held by a live socket and its directory exists.
    pub fn check(&self) -> Result<(), StreamError> {
        match self {
            Target::Stdout => Ok(()),
            Target::Fifo(p) => check_fifo(p),
            Target::Unix(p) => check_unix(p).map(|_| ()),
        }
    }
}

/// Why a stream cannot be served.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StreamError {
    /// The FIFO does not exist.
    #[error("stream FIFO {} does not exist (create it with mkfifo; `weir capture -w` writes files)", .0.display())]
    FifoMissing(PathBuf),
    /// The path is not a FIFO.
    #[error("stream target {} exists and is not a FIFO (use `weir capture -w` to write a file, unix:PATH for a socket)", .0.display())]
    NotFifo(PathBuf),
    /// A live socket answers on the path.
    #[error("unix socket {} is in use by another process", .0.display())]
    SocketInUse(PathBuf),
    /// The path exists and is not a socket.
    #[error("{} exists and is not a socket: refusing to replace it", .0.display())]
    NotSocket(PathBuf),
    /// An I/O error on the target.
    #[error("stream {}: {source}", path.display())]
    Io {
        /// The target's path.
        path: PathBuf,
        /// What the kernel said.
        source: io::Error,
    },
    /// The filter did not compile.
    #[error("stream filter `{expr}`: {source}")]
    Filter {
        /// The expression.
        expr: String,
        /// Why.
        source: weir_filter::FilterSetError,
    },
    /// Classic pcap holds one link type.
    #[error("a stream is classic pcap, which holds one link type; these interfaces have several")]
    MixedLinks,
}

fn check_fifo(p: &Path) -> Result<(), StreamError> {
    match std::fs::metadata(p) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            Err(StreamError::FifoMissing(p.to_path_buf()))
        }
        Err(source) => Err(StreamError::Io {
            path: p.to_path_buf(),
            source,
        }),
        Ok(m) if !m.file_type().is_fifo() => Err(StreamError::NotFifo(p.to_path_buf())),
        Ok(_) => Ok(()),
    }
}

/// Whether a stale socket file is there to replace.
fn check_unix(p: &Path) -> Result<bool, StreamError> {
    match std::fs::symlink_metadata(p) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            let dir = p.parent().filter(|d| !d.as_os_str().is_empty());
            match dir.map(std::fs::metadata) {
                Some(Err(source)) => Err(StreamError::Io {
                    path: p.to_path_buf(),
                    source,
                }),
                _ => Ok(false),
            }
        }
        Err(source) => Err(StreamError::Io {
            path: p.to_path_buf(),
            source,
        }),
        Ok(m) if !m.file_type().is_socket() => Err(StreamError::NotSocket(p.to_path_buf())),
        Ok(_) => match UnixStream::connect(p) {
            Ok(_) => Err(StreamError::SocketInUse(p.to_path_buf())),
            Err(_) => Ok(true),
        },
    }
}

/// One stream as configured.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct StreamConfig {
    /// Its name (in counters and summaries).
    pub name: String,
    /// A tcpdump expression; empty: every packet.
    pub filter: String,
    /// Where it goes.
    pub target: Target,
    /// The queue's bound in bytes (pcap records) between the consumer and the writer.
    pub queue_bytes: usize,
}

/// A stream's counters, live.
#[derive(Debug, Default)]
pub struct StreamStats {
    /// Packets that matched the filter.
    pub matched: AtomicU64,
    /// Packets whose last byte the kernel took for the reader.
    pub written: AtomicU64,
    /// Matching packets dropped: queue full, no reader, or in flight when the reader went.
    pub dropped: AtomicU64,
    /// Bytes in the queue now.
    pub queued_bytes: AtomicUsize,
    /// Readers (FIFO opens, socket clients) served since the start.
    pub readers: AtomicU64,
    /// A reader is attached now.
    pub attached: AtomicBool,
    /// Standard output's reader went away (the stream ends).
    pub gone: AtomicBool,
}

impl StreamStats {
    /// The counters as JSON: `matched`, `written`, `dropped`, `queued_bytes`, `readers`,
    /// `attached`.
    pub fn json(&self) -> serde_json::Value {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        serde_json::json!({
            "matched": l(&self.matched),
            "written": l(&self.written),
            "dropped": l(&self.dropped),
            "queued_bytes": self.queued_bytes.load(Ordering::Relaxed),
            "readers": l(&self.readers),
            "attached": self.attached.load(Ordering::Relaxed),
        })
    }
}

/// What a stream did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamReport {
    /// Its name.
    pub name: String,
    /// Where it went.
    pub target: String,
    /// Packets that matched the filter.
    pub matched: u64,
    /// Packets the kernel took for a reader.
    pub written: u64,
    /// Matching packets dropped (slow, paused or absent reader).
    pub dropped: u64,
    /// Readers served.
    pub readers: u64,
    /// Bytes the buffer skipped this stream over (a best-effort consumer that fell behind).
    pub skipped_bytes: u64,
    /// The error that ended its writer early, if any.
    pub error: Option<String>,
}

impl StreamReport {
    /// One line: `stream NAME (TARGET): M matched, W written, D dropped ...`.
    pub fn line(&self) -> String {
        let mut s = format!(
            "stream {} ({}): {} matched, {} written, {} dropped (slow or absent reader), {} \
             reader(s)",
            self.name, self.target, self.matched, self.written, self.dropped, self.readers
        );
        if self.skipped_bytes > 0 {
            s.push_str(&format!(
                ", {} bytes skipped in the buffer (consumer behind, not filtered)",
                self.skipped_bytes
            ));
        }
        if let Some(e) = &self.error {
            s.push_str(&format!(", error: {e}"));
        }
        s
    }
}

/// The 24-byte classic pcap header (nanosecond magic) for `link` and `snaplen`.
pub fn pcap_header(link: u32, snaplen: u32) -> [u8; 24] {
    let mut h = [0u8; 24];
    h[0..4].copy_from_slice(&0xa1b2_3c4du32.to_le_bytes());
    h[4..6].copy_from_slice(&2u16.to_le_bytes());
    h[6..8].copy_from_slice(&4u16.to_le_bytes());
    h[16..20].copy_from_slice(&snaplen.to_le_bytes());
    h[20..24].copy_from_slice(&link.to_le_bytes());
    h
}

/// One packet as a classic pcap record (nanosecond timestamps).
fn pcap_record(r: &Record<'_>) -> Vec<u8> {
    let data = r.data();
    let ts = r.ts_ns();
    let mut v = Vec::with_capacity(16 + data.len());
    v.extend_from_slice(&((ts / 1_000_000_000) as u32).to_le_bytes());
    v.extend_from_slice(&((ts % 1_000_000_000) as u32).to_le_bytes());
    v.extend_from_slice(&(data.len() as u32).to_le_bytes());
    v.extend_from_slice(&r.orig_len().max(data.len() as u32).to_le_bytes());
    v.extend_from_slice(data);
    v
}

/// The writing half of a stream: its queue, its writer thread and its counters. Packets are
/// [`offer`](Output::offer)ed without ever waiting.
pub struct Output {
    name: String,
    target: Target,
    tx: Option<mpsc::Sender<Vec<u8>>>,
    queue_bytes: usize,
    stats: Arc<StreamStats>,
    stop: Arc<AtomicBool>,
    writer: Option<JoinHandle<Option<String>>>,
}

impl std::fmt::Debug for Output {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Output")
            .field("name", &self.name)
            .field("target", &self.target)
            .finish()
    }
}

impl Output {
    /// Opens `target` (a FIFO must exist; a socket path is bound now) and starts the writer,
    /// whose pcap header says `interfaces`' link type and snap length.
    pub fn open(
        name: &str,
        target: &Target,
        queue_bytes: usize,
        interfaces: &[Interface],
    ) -> Result<Output, StreamError> {
        let link = interfaces.first().map_or(1, |i| i.link.0);
        if interfaces.iter().any(|i| i.link.0 != link) {
            return Err(StreamError::MixedLinks);
        }
        let snaplen = interfaces
            .iter()
            .map(|i| i.snaplen)
            .max()
            .filter(|&s| s > 0)
            .unwrap_or(262_144);
        let endpoint = Endpoint::open(target)?;
        let stats = Arc::new(StreamStats::default());
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = mpsc::channel();
        let writer = {
            let stats = Arc::clone(&stats);
            let stop = Arc::clone(&stop);
            let header = pcap_header(link, snaplen);
            std::thread::Builder::new()
                .name(format!("stream-{name}"))
                .spawn(move || write_loop(endpoint, header, rx, &stats, &stop))
                .map_err(|source| StreamError::Io {
                    path: PathBuf::from(name),
                    source,
                })?
        };
        Ok(Output {
            name: name.to_string(),
            target: target.clone(),
            tx: Some(tx),
            queue_bytes: queue_bytes.max(1),
            stats,
            stop,
            writer: Some(writer),
        })
    }

    /// The live counters.
    pub fn stats(&self) -> &Arc<StreamStats> {
        &self.stats
    }

    /// Queues one matching packet, or counts it dropped when the queue is full. Never waits.
    pub fn offer(&self, r: &Record<'_>) {
        let s = &self.stats;
        s.matched.fetch_add(1, Ordering::Relaxed);
        let len = 16 + r.data().len();
        let queued = s.queued_bytes.load(Ordering::Relaxed);
        if queued + len > self.queue_bytes || s.gone.load(Ordering::Relaxed) {
            s.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        s.queued_bytes.fetch_add(len, Ordering::Relaxed);
        match &self.tx {
            Some(tx) if tx.send(pcap_record(r)).is_ok() => {}
            _ => {
                s.queued_bytes.fetch_sub(len, Ordering::Relaxed);
                s.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// True when standard output's reader went away.
    pub fn gone(&self) -> bool {
        self.stats.gone.load(Ordering::Relaxed)
    }

    /// Hands what is queued to the reader (for at most [`STOP_GRACE`] if it does not take it),
    /// stops the writer and reports; `skipped_bytes` is the buffer's count for the consumer.
    pub fn finish(mut self, skipped_bytes: u64) -> StreamReport {
        self.tx = None;
        self.stop.store(true, Ordering::Relaxed);
        let error = self
            .writer
            .take()
            .and_then(|w| w.join().unwrap_or(Some("the writer panicked".into())));
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        StreamReport {
            name: self.name.clone(),
            target: self.target.to_string(),
            matched: l(&self.stats.matched),
            written: l(&self.stats.written),
            dropped: l(&self.stats.dropped),
            readers: l(&self.stats.readers),
            skipped_bytes,
            error,
        }
    }
}

impl Drop for Output {
    fn drop(&mut self) {
        self.tx = None;
        self.stop.store(true, Ordering::Relaxed);
        if let Some(w) = self.writer.take() {
            let _ = w.join();
        }
        if let Target::Unix(p) = &self.target {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// Where the writer writes: the reader-facing side of a target.
enum Endpoint {
    Stdout(Option<std::fs::File>),
    Fifo(FifoWatch),
    Unix(UnixListener),
}

/// A FIFO and the inotify watch that sees each of its readers close.
///
/// A FIFO's reader that leaves while the writer still holds its end leaves the pipe alive, and a
/// reader that opens the path before the writer looks joins that same pipe: polling for
/// POLLERR (no reader at all) misses such a changeover, and the new reader would get the middle
/// of the old stream. inotify queues every close (`IN_CLOSE_NOWRITE`, in the closing process's
/// `close` itself, before the pipe forgets the reader), so the writer, which reads the queue
/// before each write, never misses one: the packets it writes after a reader left start a new
/// session with a pcap header, and the bytes the old reader left unread in the pipe are read
/// out (discarded) first.
struct FifoWatch {
    path: PathBuf,
    inotify: std::os::fd::OwnedFd,
    /// Our own read-side closes (the leftover drains) still to be taken off the queue's count.
    own_closes: u64,
}

impl FifoWatch {
    fn new(path: &Path) -> io::Result<FifoWatch> {
        use rustix::fs::inotify;
        let fd = inotify::init(inotify::CreateFlags::NONBLOCK | inotify::CreateFlags::CLOEXEC)?;
        inotify::add_watch(&fd, path, inotify::WatchFlags::CLOSE_NOWRITE)?;
        Ok(FifoWatch {
            path: path.to_path_buf(),
            inotify: fd,
            own_closes: 0,
        })
    }

    /// Whether a reader closed the FIFO since the last call (an overflowed queue counts as
    /// one: the session is ended rather than risk a headerless stream).
    fn reader_left(&mut self) -> io::Result<bool> {
        use rustix::fs::inotify::{ReadFlags, Reader};
        let mut buf = [std::mem::MaybeUninit::<u8>::uninit(); 4096];
        let mut reader = Reader::new(&self.inotify, &mut buf);
        let mut closes = 0u64;
        loop {
            match reader.next() {
                Ok(ev) => {
                    if ev.events().contains(ReadFlags::QUEUE_OVERFLOW) {
                        closes += self.own_closes + 1;
                    } else if ev.events().contains(ReadFlags::CLOSE_NOWRITE) {
                        closes += 1;
                    }
                }
                Err(rustix::io::Errno::AGAIN) => break,
                Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(e.into()),
            }
        }
        let own = closes.min(self.own_closes);
        self.own_closes -= own;
        Ok(closes > own)
    }

    /// Waits at most `d` for a reader's close.
    fn wait(&self, d: Duration) {
        use rustix::event::{poll, PollFd, PollFlags, Timespec};
        let mut fds = [PollFd::new(&self.inotify, PollFlags::IN)];
        let t = Timespec {
            tv_sec: 0,
            tv_nsec: d.subsec_nanos().into(),
        };
        let _ = poll(&mut fds, Some(&t));
    }

    /// Reads out (discards) what the previous reader left unread in the pipe `conn` writes to,
    /// so the next reader's first bytes are its own header.
    fn discard_leftovers(&mut self, conn: &Conn) {
        use std::os::fd::AsFd;
        let Conn::File(f) = conn else { return };
        let mut left = match rustix::io::ioctl_fionread(f.as_fd()) {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        let Ok(mut r) = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(O_NONBLOCK)
            .open(&self.path)
        else {
            return;
        };
        let mut buf = vec![0u8; 1 << 16];
        while left > 0 {
            let want = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
            match io::Read::read(&mut r, &mut buf[..want]) {
                Ok(0) => break,
                Ok(n) => left -= n as u64,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
        drop(r);
        self.own_closes += 1;
    }
}

/// A reader attached to the stream.
enum Conn {
    File(std::fs::File),
    Socket(UnixStream),
}

impl Write for Conn {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        match self {
            Conn::File(f) => f.write(b),
            Conn::Socket(s) => s.write(b),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Conn {
    /// Whether the reader went away (POLLERR/POLLHUP on our end), asked while nothing is
    /// pending: a FIFO's next reader must not get the middle of the previous reader's stream.
    fn hung_up(&self) -> bool {
        use rustix::event::{poll, PollFd, PollFlags};
        use std::os::fd::AsFd;
        let fd = match self {
            Conn::File(f) => f.as_fd(),
            Conn::Socket(s) => s.as_fd(),
        };
        let mut fds = [PollFd::from_borrowed_fd(fd, PollFlags::OUT)];
        let zero = rustix::event::Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        match poll(&mut fds, Some(&zero)) {
            Ok(n) if n > 0 => fds[0].revents().intersects(PollFlags::ERR | PollFlags::HUP),
            _ => false,
        }
    }
}

/// O_NONBLOCK (Linux): writes to a slow reader return at once.
const O_NONBLOCK: i32 = libc::O_NONBLOCK;

impl Endpoint {
    fn open(target: &Target) -> Result<Endpoint, StreamError> {
        match target {
            Target::Stdout => {
                // A description of our own on the same pipe, non-blocking, so a paused reader
                // never holds the writer past a stop; fd 1 itself is left as it is.
                let f = std::fs::OpenOptions::new()
                    .write(true)
                    .custom_flags(O_NONBLOCK)
                    .open("/proc/self/fd/1")
                    .map_err(|source| StreamError::Io {
                        path: "standard output".into(),
                        source,
                    })?;
                Ok(Endpoint::Stdout(Some(f)))
            }
            Target::Fifo(p) => {
                check_fifo(p)?;
                let w = FifoWatch::new(p).map_err(|source| StreamError::Io {
                    path: p.clone(),
                    source,
                })?;
                Ok(Endpoint::Fifo(w))
            }
            Target::Unix(p) => {
                if check_unix(p)? {
                    std::fs::remove_file(p).map_err(|source| StreamError::Io {
                        path: p.clone(),
                        source,
                    })?;
                }
                let l = UnixListener::bind(p).map_err(|source| match source.kind() {
                    io::ErrorKind::AddrInUse => StreamError::SocketInUse(p.clone()),
                    _ => StreamError::Io {
                        path: p.clone(),
                        source,
                    },
                })?;
                l.set_nonblocking(true).map_err(|source| StreamError::Io {
                    path: p.clone(),
                    source,
                })?;
                Ok(Endpoint::Unix(l))
            }
        }
    }

    /// A reader, if one is there now (`Ok(None)`: none yet).
    fn accept(&mut self) -> io::Result<Option<Conn>> {
        match self {
            Endpoint::Stdout(f) => Ok(f.take().map(Conn::File)),
            Endpoint::Fifo(w) => {
                match std::fs::OpenOptions::new()
                    .write(true)
                    .custom_flags(O_NONBLOCK)
                    .open(&w.path)
                {
                    Ok(f) => {
                        // closes queued before this session are earlier readers'
                        w.reader_left()?;
                        Ok(Some(Conn::File(f)))
                    }
                    // ENXIO: no reader has the FIFO open
                    Err(e) if e.raw_os_error() == Some(libc::ENXIO) => Ok(None),
                    Err(e) => Err(e),
                }
            }
            Endpoint::Unix(l) => match l.accept() {
                Ok((s, _)) => {
                    s.set_nonblocking(true)?;
                    let _ = s.shutdown(std::net::Shutdown::Read);
                    Ok(Some(Conn::Socket(s)))
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
                Err(e) => Err(e),
            },
        }
    }

    fn reconnects(&self) -> bool {
        !matches!(self, Endpoint::Stdout(_))
    }
}

/// Bytes waiting for the reader, with the packets they end.
struct Pending {
    bytes: VecDeque<u8>,
    /// Each packet's end, as a count of bytes from the start of `bytes`' history.
    ends: VecDeque<u64>,
    /// Bytes taken by the kernel since the reader attached.
    sent: u64,
    /// Bytes queued since the reader attached.
    total: u64,
    /// Where the packet (or header) being sent ends, counted like `sent`: the reader got
    /// whole packets while `sent` is 0 or the end of the last one wholly sent.
    boundary: u64,
    /// The reader is counted in `readers` (a FIFO's once the kernel took its first byte: a
    /// header written to nobody is no reader).
    counted: bool,
}

impl Pending {
    fn new(header: &[u8], counted: bool) -> Pending {
        Pending {
            bytes: header.iter().copied().collect(),
            ends: VecDeque::new(),
            sent: 0,
            total: header.len() as u64,
            boundary: header.len() as u64,
            counted,
        }
    }

    /// Whether the reader got part of a packet (or of the header) and not its end: stopping
    /// now would leave it a cut packet.
    fn mid_packet(&self) -> bool {
        self.sent > 0 && self.sent < self.boundary
    }

    /// The stream is out of time: keeps only the rest of the packet the reader has part of
    /// (so that it still gets whole packets) and counts every later one dropped. `true`: a
    /// rest is left to send.
    fn keep_only_current(&mut self, stats: &StreamStats) -> bool {
        let keep = if self.mid_packet() {
            self.boundary - self.sent
        } else {
            0
        };
        // the packets ending past the current one are not sent
        let later = self.ends.iter().filter(|&&e| e > self.sent + keep).count();
        stats.dropped.fetch_add(later as u64, Ordering::Relaxed);
        self.ends.truncate(self.ends.len() - later);
        self.bytes
            .truncate(usize::try_from(keep).unwrap_or(usize::MAX));
        self.total = self.sent + keep;
        keep > 0
    }

    fn push(&mut self, rec: &[u8]) {
        self.bytes.extend(rec);
        self.total += rec.len() as u64;
        self.ends.push_back(self.total);
        if self.boundary <= self.sent {
            // everything before was sent: this packet is the one being sent now
            self.boundary = self.total;
        }
    }

    /// Writes what it can without waiting; counts the packets now wholly sent. `Ok(true)`: all
    /// sent.
    fn send(&mut self, conn: &mut Conn, stats: &StreamStats) -> io::Result<bool> {
        while !self.bytes.is_empty() {
            let (a, _) = self.bytes.as_slices();
            match conn.write(a) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    if !self.counted {
                        self.counted = true;
                        stats.readers.fetch_add(1, Ordering::Relaxed);
                        stats.attached.store(true, Ordering::Relaxed);
                    }
                    self.bytes.drain(..n);
                    self.sent += n as u64;
                    while self.ends.front().is_some_and(|&e| e <= self.sent) {
                        self.ends.pop_front();
                        stats.written.fetch_add(1, Ordering::Relaxed);
                    }
                    if self.sent >= self.boundary {
                        // the next packet's end (or, nothing queued yet, the next byte's)
                        self.boundary = self.ends.front().copied().unwrap_or(self.total);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }

    /// The reader went: the packets not wholly sent are dropped.
    fn abandon(self, stats: &StreamStats) {
        stats
            .dropped
            .fetch_add(self.ends.len() as u64, Ordering::Relaxed);
    }
}

/// Longest a stream's writer waits for the consumer's next packet when it has nothing to send:
/// how soon a reader that attaches (opens the FIFO, connects to the socket) gets its pcap header
/// while no packet comes, and a reader's leaving is seen. (Session 21: it slept 1 ms at a time
/// whatever it had to do, ≈ 1 000 wake-ups a second with no traffic; with something to send to
/// a reader that does not take it, it still looks every 1 ms.)
const WRITER_IDLE: Duration = Duration::from_millis(100);

/// The writer thread: readers attach, get a header and the packets from then on; returns the
/// error that ended it, if any.
fn write_loop(
    mut endpoint: Endpoint,
    header: [u8; 24],
    rx: mpsc::Receiver<Vec<u8>>,
    stats: &StreamStats,
    stop: &AtomicBool,
) -> Option<String> {
    let mut conn: Option<(Conn, Pending)> = None;
    let mut stopping_since: Option<Instant> = None;
    // Out of time with the reader holding part of a packet: the rest of that packet only is
    // sent, as long as the reader keeps taking bytes (a reader that stays never gets a cut
    // packet; one that stopped reading for STOP_GRACE is given up on).
    let mut finishing: Option<(Instant, u64)> = None;
    let mut closed = false;
    let mut error = None;
    // a packet taken from the queue while waiting for one, handed on by the next turn
    let mut carry: Option<Vec<u8>> = None;
    loop {
        if stop.load(Ordering::Relaxed) && stopping_since.is_none() {
            stopping_since = Some(Instant::now());
        }
        let out_of_time = stopping_since.is_some_and(|t| t.elapsed() >= STOP_GRACE);
        if out_of_time && finishing.is_none() {
            let rest = conn
                .as_mut()
                .is_some_and(|(_, p)| p.keep_only_current(stats));
            let sent = conn.as_ref().map_or(0, |(_, p)| p.sent);
            finishing = Some((Instant::now(), sent));
            if !rest {
                break;
            }
        }
        if let Some((since, at)) = &mut finishing {
            let Some((_, p)) = &conn else { break };
            if p.bytes.is_empty() {
                break;
            }
            if p.sent != *at {
                *since = Instant::now();
                *at = p.sent;
            } else if since.elapsed() >= STOP_GRACE {
                // the reader stopped reading: it gets a cut packet, counted dropped
                break;
            }
        }
        if conn.is_none() && !stats.gone.load(Ordering::Relaxed) && !out_of_time {
            match endpoint.accept() {
                Ok(Some(c)) => {
                    // a FIFO's reader is counted when it takes bytes; a socket's client and
                    // standard output now
                    let counted = !matches!(endpoint, Endpoint::Fifo(_));
                    if counted {
                        stats.readers.fetch_add(1, Ordering::Relaxed);
                        stats.attached.store(true, Ordering::Relaxed);
                    }
                    conn = Some((c, Pending::new(&header, counted)));
                }
                Ok(None) => {}
                Err(e) => {
                    error = Some(e.to_string());
                    stats.gone.store(true, Ordering::Relaxed);
                }
            }
        }
        if conn
            .as_ref()
            .is_some_and(|(c, p)| p.bytes.is_empty() && c.hung_up())
        {
            conn = None;
            stats.attached.store(false, Ordering::Relaxed);
            if !endpoint.reconnects() {
                stats.gone.store(true, Ordering::Relaxed);
            }
        }
        // take what the consumer queued
        let mut got = false;
        loop {
            match carry.take().map_or_else(|| rx.try_recv(), Ok) {
                Ok(rec) => {
                    got = true;
                    stats.queued_bytes.fetch_sub(rec.len(), Ordering::Relaxed);
                    match &mut conn {
                        Some((_, p)) if finishing.is_none() => p.push(&rec),
                        // no reader (or out of time): the packet is lost for this stream
                        _ => {
                            stats.dropped.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    if conn.as_ref().is_some_and(|(_, p)| p.bytes.len() >= 1 << 16) {
                        break;
                    }
                }
                Err(mpsc::TryRecvError::Empty) => break,
                Err(mpsc::TryRecvError::Disconnected) => {
                    closed = true;
                    break;
                }
            }
        }
        // A FIFO reader that left ends its session even when the next one already opened
        // the pipe: the next packets go to a new session, header first.
        if let (Endpoint::Fifo(w), Some((c, p))) = (&mut endpoint, &mut conn) {
            match w.reader_left() {
                Ok(false) => {}
                Ok(true) => {
                    w.discard_leftovers(c);
                    std::mem::replace(p, Pending::new(&header, false)).abandon(stats);
                    stats.attached.store(false, Ordering::Relaxed);
                    if finishing.is_some() {
                        // out of time: no new session
                        break;
                    }
                }
                Err(e) => {
                    error = Some(format!("watching the FIFO's readers: {e}"));
                    stats.gone.store(true, Ordering::Relaxed);
                    if let Some((_, p)) = conn.take() {
                        p.abandon(stats);
                    }
                    stats.attached.store(false, Ordering::Relaxed);
                }
            }
        }
        let mut all_sent = true;
        if let Some((c, p)) = &mut conn {
            match p.send(c, stats) {
                Ok(done) => all_sent = done,
                Err(e) => {
                    // the reader went away (EPIPE) or the socket broke
                    let (_, p) = conn.take().unwrap_or_else(|| unreachable!());
                    p.abandon(stats);
                    stats.attached.store(false, Ordering::Relaxed);
                    if !endpoint.reconnects() {
                        stats.gone.store(true, Ordering::Relaxed);
                        if e.kind() != io::ErrorKind::BrokenPipe {
                            error = Some(e.to_string());
                        }
                    }
                }
            }
        }
        if closed && all_sent {
            break;
        }
        if closed && conn.is_none() {
            break;
        }
        let pending = conn.as_ref().is_some_and(|(_, p)| !p.bytes.is_empty());
        if !got && !pending && stopping_since.is_none() {
            // Nothing to send: wait for the consumer's next packet (taken by the next turn), at
            // most WRITER_IDLE (readers attaching and leaving are looked at then); the stop
            // closes the channel, which ends the wait at once.
            if let Ok(rec) = rx.recv_timeout(WRITER_IDLE) {
                carry = Some(rec);
            }
        } else if !got || !all_sent {
            match &endpoint {
                // woken at once by a reader's close
                Endpoint::Fifo(w) => w.wait(Duration::from_millis(1)),
                _ => std::thread::sleep(Duration::from_millis(1)),
            }
        }
    }
    // what is left is dropped: still queued, or not wholly taken by the reader
    while let Ok(rec) = rx.try_recv() {
        stats.queued_bytes.fetch_sub(rec.len(), Ordering::Relaxed);
        stats.dropped.fetch_add(1, Ordering::Relaxed);
    }
    if let Some((_, p)) = conn {
        p.abandon(stats);
    }
    stats.attached.store(false, Ordering::Relaxed);
    error
}

/// A stream reading the shared buffer through its own cursor: its consumer thread and its
/// [`Output`].
pub struct Stream {
    name: String,
    reader_slot: usize,
    stop: Arc<AtomicBool>,
    waker: weir_buffer::Waker,
    consumer: Option<JoinHandle<Output>>,
    stats: Arc<StreamStats>,
}

impl std::fmt::Debug for Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stream").field("name", &self.name).finish()
    }
}

impl Stream {
    /// Opens `cfg`'s target, compiles its filter for `interfaces` and starts reading with
    /// `reader` (the buffer's reader number `reader_slot`, for its skip counters).
    pub fn spawn(
        cfg: &StreamConfig,
        mut reader: Reader,
        reader_slot: usize,
        interfaces: &[Interface],
    ) -> Result<Stream, SensorError> {
        let filters = compile(&cfg.filter, interfaces)?;
        let out = Output::open(&cfg.name, &cfg.target, cfg.queue_bytes, interfaces)?;
        let stats = Arc::clone(out.stats());
        let stop = Arc::new(AtomicBool::new(false));
        let waker = reader.waker();
        let consumer = {
            let stop = Arc::clone(&stop);
            std::thread::Builder::new()
                .name(format!("stream-in-{}", cfg.name))
                .spawn(move || {
                    consume(&mut reader, &filters, &out, &stop);
                    out
                })
                .map_err(SensorError::Thread)?
        };
        Ok(Stream {
            name: cfg.name.clone(),
            reader_slot,
            stop,
            waker,
            consumer: Some(consumer),
            stats,
        })
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The live counters.
    pub fn stats(&self) -> &Arc<StreamStats> {
        &self.stats
    }

    /// Reads what is left in the buffer (call it after capture stopped), hands it to the
    /// reader and reports. `buffer` gives the skip counters.
    pub fn finish(mut self, buffer: &weir_buffer::Stats) -> StreamReport {
        self.stop.store(true, Ordering::Release);
        self.waker.wake();
        let skipped = buffer
            .readers
            .get(self.reader_slot)
            .map_or(0, |r| r.skipped_bytes);
        match self.consumer.take().map(JoinHandle::join) {
            Some(Ok(out)) => out.finish(skipped),
            _ => StreamReport {
                name: self.name.clone(),
                target: String::new(),
                matched: self.stats.matched.load(Ordering::Relaxed),
                written: self.stats.written.load(Ordering::Relaxed),
                dropped: self.stats.dropped.load(Ordering::Relaxed),
                readers: self.stats.readers.load(Ordering::Relaxed),
                skipped_bytes: skipped,
                error: Some("the stream's consumer panicked".into()),
            },
        }
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        self.waker.wake();
        if let Some(c) = self.consumer.take() {
            let _ = c.join();
        }
    }
}

/// The stream's filter for each interface (in interface-id order); `None`: every packet.
fn compile(expr: &str, interfaces: &[Interface]) -> Result<Option<Vec<Filter>>, StreamError> {
    let err = |source| StreamError::Filter {
        expr: expr.to_string(),
        source,
    };
    let mut set = FilterSet::new(expr).map_err(err)?;
    if set.is_empty() {
        return Ok(None);
    }
    set.for_interfaces(interfaces).map(Some).map_err(err)
}

/// The consumer: every record past the cursor through the filter into the output, until
/// `stop` is set and the buffer has nothing more. With nothing new it waits on the reader's
/// doorbell for the next records capture hands over (a ring block, at least every 50 ms
/// while packets come: the stream's latency stays the capture's) or [`CONSUMER_WAIT`];
/// [`Stream::finish`] wakes it at once. (Session 21: it slept 1 ms at a time, ≈ 1 000 wake-ups
/// a second with no traffic.)
fn consume(reader: &mut Reader, filters: &Option<Vec<Filter>>, out: &Output, stop: &AtomicBool) {
    loop {
        // read the flag before the batch: a batch empty after the stop is the end
        let stopping = stop.load(Ordering::Acquire);
        let mut idle = false;
        match reader.next_batch() {
            Some(batch) => {
                for r in batch.records() {
                    let keep = match filters {
                        None => true,
                        Some(f) => f
                            .get(r.iface() as usize)
                            .is_some_and(|f| f.matches(r.data(), r.orig_len())),
                    };
                    if keep {
                        out.offer(&r);
                    }
                }
                batch.release();
            }
            None if stopping => return,
            None => idle = true,
        }
        if idle {
            // any record past the cursor (offsets are multiples of 8) ends the wait
            let next = reader.position().wrapping_add(8);
            reader.wait(next, CONSUMER_WAIT);
        }
    }
}

/// Longest a stream's consumer waits for records with nothing new (a stop wakes it; this only
/// bounds a wake-up missed).
const CONSUMER_WAIT: Duration = Duration::from_secs(1);

/// A set of streams on one buffer, as a record job runs them.
#[derive(Debug, Default)]
pub struct Streams {
    streams: Vec<Stream>,
}

impl Streams {
    /// Starts `cfgs` on `buffer`, the first on reader number `first_reader`, the next on the
    /// following ones.
    pub fn spawn(
        cfgs: &[StreamConfig],
        buffer: &weir_buffer::PacketBuffer,
        first_reader: usize,
        interfaces: &[Interface],
    ) -> Result<Streams, SensorError> {
        let mut streams = Vec::new();
        for (i, c) in cfgs.iter().enumerate() {
            let slot = first_reader + i;
            streams.push(Stream::spawn(c, buffer.reader(slot)?, slot, interfaces)?);
        }
        Ok(Streams { streams })
    }

    /// Every stream's live counters, by name.
    pub fn stats(&self) -> Vec<(String, Arc<StreamStats>)> {
        self.streams
            .iter()
            .map(|s| (s.name.clone(), Arc::clone(&s.stats)))
            .collect()
    }

    /// Every stream's counters as JSON, by name (`null` when there are none).
    pub fn json(&self) -> serde_json::Value {
        if self.streams.is_empty() {
            return serde_json::Value::Null;
        }
        let mut m = serde_json::Map::new();
        for s in &self.streams {
            m.insert(s.name.clone(), s.stats.json());
        }
        serde_json::Value::Object(m)
    }

    /// Finishes every stream (after capture stopped), in order.
    pub fn finish(self, buffer: &weir_buffer::PacketBuffer) -> Vec<StreamReport> {
        let stats = buffer.stats();
        self.streams.into_iter().map(|s| s.finish(&stats)).collect()
    }
}

/// Finished streams' counters as JSON, by name (the same keys as [`StreamStats::json`] with
/// `skipped_bytes` and `error`; `null` when there are none).
pub fn reports_json(reports: &[StreamReport]) -> serde_json::Value {
    if reports.is_empty() {
        return serde_json::Value::Null;
    }
    let mut m = serde_json::Map::new();
    for r in reports {
        m.insert(
            r.name.clone(),
            serde_json::json!({
                "matched": r.matched,
                "written": r.written,
                "dropped": r.dropped,
                "queued_bytes": 0,
                "readers": r.readers,
                "attached": false,
                "skipped_bytes": r.skipped_bytes,
                "error": r.error,
            }),
        );
    }
    serde_json::Value::Object(m)
}

/// A stream as the sink of a capture job (`weir stream`): the capture job's reader is the
/// consumer, the kernel filter the stream's filter.
pub struct Sink {
    out: Output,
}

impl Sink {
    /// Opens `target` for `interfaces`.
    pub fn open(
        target: &Target,
        queue_bytes: usize,
        interfaces: &[Interface],
    ) -> Result<Sink, SensorError> {
        Ok(Sink {
            out: Output::open("stream", target, queue_bytes, interfaces)?,
        })
    }

    /// The live counters.
    pub fn stats(&self) -> &Arc<StreamStats> {
        self.out.stats()
    }

    /// Hands what is queued to the reader and reports.
    pub fn finish(self) -> StreamReport {
        self.out.finish(0)
    }
}

impl crate::sink::PacketSink for Sink {
    type Error = SensorError;

    fn packet(&mut self, _: &[Interface], record: &Record<'_>) -> Result<(), SensorError> {
        self.out.offer(record);
        Ok(())
    }

    fn flush(&mut self) -> Result<(), SensorError> {
        Ok(())
    }

    fn closed(&self) -> bool {
        self.out.gone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_parse() {
        assert_eq!("-".parse::<Target>(), Ok(Target::Stdout));
        assert_eq!(
            "unix:/run/s".parse::<Target>(),
            Ok(Target::Unix("/run/s".into()))
        );
        assert_eq!(
            "/tmp/f".parse::<Target>(),
            Ok(Target::Fifo("/tmp/f".into()))
        );
        assert!("".parse::<Target>().is_err());
        assert!("unix:".parse::<Target>().is_err());
    }

    #[test]
    fn header_is_nanosecond_pcap() {
        let h = pcap_header(1, 65535);
        assert_eq!(&h[0..4], &[0x4d, 0x3c, 0xb2, 0xa1]);
        assert_eq!(u32::from_le_bytes([h[16], h[17], h[18], h[19]]), 65535);
        assert_eq!(u32::from_le_bytes([h[20], h[21], h[22], h[23]]), 1);
    }

    /// A reader that stays gets whole packets even when the stop's grace runs out while it
    /// holds part of one (what CI saw: tshark, slow under load, read "a file cut short in the
    /// middle of a packet"). The reader opens the FIFO, reads nothing until the stream has
    /// given up on the packets it had not begun (its first drop, after the grace), then reads
    /// to the end: the pipe held 64 KiB, which ends inside the 65th packet, and the reader
    /// gets exactly the header and 65 whole packets; written + dropped = matched.
    #[test]
    fn a_reader_that_stays_never_gets_a_cut_packet() {
        use std::io::Read;
        let d = tempfile::tempdir().unwrap();
        let fifo = d.path().join("f");
        assert!(std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success());
        // the reader first: the writer opens the FIFO only when one is there
        let mut r = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(O_NONBLOCK)
            .open(&fifo)
            .unwrap();
        let buf = weir_buffer::PacketBuffer::new(1 << 22, 1).unwrap();
        let mut w = buf.writer().unwrap();
        let iface = Interface::new(weir_packet::LinkType::ETHERNET, 65535);
        let out = Output::open("t", &Target::Fifo(fifo), 1 << 22, &[iface]).unwrap();
        let n = 200u64;
        for i in 0..n {
            w.push(0, 1_000_000_000 + i, 1000, &[i as u8; 1000])
                .unwrap();
        }
        let mut reader = buf.reader(0).unwrap();
        let batch = reader.next_batch().unwrap();
        for rec in batch.records() {
            out.offer(&rec);
        }
        batch.release();
        let stats = Arc::clone(out.stats());
        let end = std::thread::spawn(move || out.finish(0));
        while stats.dropped.load(Ordering::Relaxed) == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
        let mut got = Vec::new();
        let mut chunk = [0u8; 8192];
        loop {
            match r.read(&mut chunk) {
                Ok(0) => break,
                Ok(k) => got.extend_from_slice(&chunk[..k]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    std::thread::sleep(Duration::from_millis(1))
                }
                Err(e) => panic!("{e}"),
            }
        }
        let report = end.join().unwrap();
        // the pipe's 64 KiB ended inside a packet (records are 1 016 bytes): the reader gets
        // the header and whole packets, the last one finished after the grace
        assert_eq!(&got[..24], &pcap_header(1, 65535));
        assert_eq!((got.len() - 24) % 1016, 0, "a cut packet: {report:?}");
        let whole = (got.len() - 24) / 1016;
        assert!(whole > 60 && whole < 70, "{whole} packets: {report:?}");
        for (i, rec) in got[24..].chunks(1016).enumerate() {
            assert_eq!(&rec[8..12], &1000u32.to_le_bytes(), "packet {i}");
            assert!(rec[16..].iter().all(|&b| b == i as u8), "packet {i}");
        }
        assert_eq!(report.written, whole as u64, "{report:?}");
        assert_eq!(report.written + report.dropped, n, "{report:?}");
        assert_eq!(report.matched, n);
    }

    #[test]
    fn missing_fifo_and_busy_socket_are_refused() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("nope");
        assert!(matches!(
            Target::Fifo(f.clone()).check(),
            Err(StreamError::FifoMissing(_))
        ));
        std::fs::write(&f, b"x").unwrap();
        assert!(matches!(
            Target::Fifo(f.clone()).check(),
            Err(StreamError::NotFifo(_))
        ));
        assert!(matches!(
            Target::Unix(f.clone()).check(),
            Err(StreamError::NotSocket(_))
        ));
        let s = d.path().join("s.sock");
        let _l = UnixListener::bind(&s).unwrap();
        assert!(matches!(
            Target::Unix(s.clone()).check(),
            Err(StreamError::SocketInUse(_))
        ));
        drop(_l);
        // stale: the file is left, nobody listens
        assert!(Target::Unix(s).check().is_ok());
    }
}
