//! `weir extract --sensor URL[,URL...]`: the same extract asked of several `weir serve`
//! instances at once ([`merge`]), their packets merged in time order into one output (ties go
//! to the sensor named first, as mergecap does). Each sensor is read by a thread of its own;
//! a sensor that cannot be reached, refuses the request or fails while sending is reported in
//! the [`SensorReport`]s and the others' packets are still written.

use std::io::{BufReader, Read, Write};
use std::net::ToSocketAddrs;
use std::sync::mpsc::{sync_channel, Receiver};
use std::sync::Arc;
use std::time::Duration;

use weir_packet::{Interface, PacketMeta};
use weir_pcap::{FileFormat, FileReader, PacketWriter, WriteError};

use weir_httpd::wire::{encode, read_head, ChunkedReader};

/// What to ask every sensor.
#[derive(Debug, Clone)]
pub struct RemoteQuery {
    /// Earliest packet time, ns since the epoch.
    pub from: u64,
    /// Latest packet time (inclusive).
    pub to: u64,
    /// tcpdump expression (empty: every packet).
    pub filter: String,
    /// Bearer token sent to every sensor.
    pub token: Option<String>,
    /// How long a sensor may send nothing (connecting, answering, streaming) before it is
    /// taken as failed ([`DEFAULT_SILENCE`] unless told).
    pub silence: Duration,
    /// The fewest bytes per second a sensor must send over each `silence` of its answer
    /// ([`DEFAULT_MIN_RATE`] unless told; 0: no minimum), so that a sensor dripping its answer
    /// cannot hold the extract for ever ([`weir_httpd::client::Pace`]).
    pub min_rate: u64,
    /// TLS for `https://` sensors: the CA that signed their certificates, and this client's
    /// certificate ([`weir_httpd::tls::client_config`]).
    pub tls: Option<Arc<weir_httpd::rustls::ClientConfig>>,
}

/// How long a sensor may send nothing before it is taken as failed, by default: a sensor that
/// accepts the connection and never answers costs the whole extract that long.
pub const DEFAULT_SILENCE: Duration = Duration::from_secs(30);

/// The fewest bytes per second a sensor must send, on average over each [`DEFAULT_SILENCE`]
/// of its answer, by default. A sensor sends its answer in bursts of up to 1 MiB (its
/// buffer), so a working one is far above it; one dripping a byte at a time is far below.
pub const DEFAULT_MIN_RATE: u64 = 1024;

impl RemoteQuery {
    /// How slow a sensor may be ([`weir_httpd::client::Pace`]), with the options that set it.
    fn pace(&self) -> weir_httpd::client::Pace {
        weir_httpd::client::Pace {
            silence: self.silence,
            min_rate: self.min_rate,
            who: "the sensor",
            options: ("--sensor-timeout", "--sensor-min-rate"),
        }
    }
}

/// How one sensor did.
#[derive(Debug, Clone, Default)]
pub struct SensorReport {
    /// The URL as given.
    pub url: String,
    /// Packets it contributed.
    pub packets: u64,
    /// Its notices (`X-Weir-Notice`), and whether it said packets may be missing.
    pub notices: Vec<String>,
    /// It said packets may be missing from its store's answer.
    pub damaged: bool,
    /// Why it failed (its packets up to then are in the output).
    pub error: Option<String>,
}

impl SensorReport {
    /// What to warn about this sensor: its notices, then its failure (`URL: failed: WHY`).
    pub fn warnings(&self) -> Vec<String> {
        let notices = self.notices.iter().map(|n| format!("{}: {n}", self.url));
        let failed = self
            .error
            .iter()
            .map(|e| format!("{}: failed: {e}", self.url));
        notices.chain(failed).collect()
    }

    /// True when packets may be missing from this sensor's part: it failed or said so.
    pub fn incomplete(&self) -> bool {
        self.error.is_some() || self.damaged
    }
}

/// How the sensors answered, in one line: `OK of N sensor(s) answered; packets: URL N, ...`.
pub fn summary(reports: &[SensorReport]) -> String {
    let ok = reports.iter().filter(|r| r.error.is_none()).count();
    let per: Vec<String> = reports
        .iter()
        .map(|r| format!("{} {}", r.url, r.packets))
        .collect();
    format!(
        "{ok} of {} sensor(s) answered; packets: {}",
        reports.len(),
        per.join(", ")
    )
}

/// Why the merged output could not be written.
#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    /// Writing the output failed.
    #[error(transparent)]
    Write(#[from] WriteError),
    /// Classic pcap holds one link type; the sensors' packets have several.
    #[error("the sensors' packets have several link types; use --format pcapng")]
    MixedLinks,
}

/// A sensor URL: `http://HOST:PORT[/]` or `https://HOST:PORT[/]` (no path): whether it is
/// TLS, and `HOST:PORT`.
pub fn host_port(url: &str) -> Result<(bool, String), String> {
    let (tls, rest) = if let Some(r) = url.strip_prefix("https://") {
        (true, r)
    } else if let Some(r) = url.strip_prefix("http://") {
        (false, r)
    } else {
        return Err(format!("{url}: give http://HOST:PORT or https://HOST:PORT"));
    };
    let hp = rest.trim_end_matches('/');
    if hp.is_empty() || hp.contains('/') {
        return Err(format!("{url}: give http://HOST:PORT with no path"));
    }
    Ok((tls, hp.to_owned()))
}

/// What a sensor's thread sends: first its interfaces, then packets in batches, then the end.
/// A packet a sensor sent: its metadata, bytes and comments (pcapng: the rules' tags).
type Fetched = (PacketMeta, Vec<u8>, Vec<Vec<u8>>);

enum Msg {
    Start(Vec<Interface>, Vec<String>, bool),
    Batch(Vec<Fetched>),
    Failed(String),
    End,
}

/// Opens the extract stream of one sensor.
fn open(
    url: &str,
    q: &RemoteQuery,
    format: FileFormat,
) -> Result<(FileReader, Vec<String>, bool), String> {
    let (secure, hp) = host_port(url)?;
    let tls = match (secure, &q.tls) {
        (true, None) => {
            return Err(format!(
                "{url}: https needs --tls-ca (the CA that signed the sensor's certificate)"
            ))
        }
        (true, Some(c)) => Some(c),
        (false, _) => None,
    };
    let addr = hp
        .to_socket_addrs()
        .map_err(|e| format!("{hp}: {e}"))?
        .next()
        .ok_or_else(|| format!("{hp}: no address"))?;
    let host = hp.rsplit_once(':').map_or(hp.as_str(), |(h, _)| h);
    // a sensor that sends nothing for `silence`, or too little, is taken as failed
    let mut conn = weir_httpd::client::connect(
        addr,
        host,
        tls,
        q.silence.min(Duration::from_secs(10)),
        q.pace(),
    )
    .map_err(|e| format!("cannot connect to {addr}: {e}"))?;
    let tls_err = |what: &str, e: std::io::Error| {
        if secure {
            format!("TLS with {addr} failed: {what}: {e}")
        } else {
            format!("{what}: {e}")
        }
    };
    let fmt = if format == FileFormat::Pcapng {
        "pcapng"
    } else {
        "pcap"
    };
    let mut req = format!(
        "GET /extract?from={}&to={}&filter={}&format={fmt} HTTP/1.1\r\nHost: {hp}\r\n\
         Connection: close\r\n",
        q.from,
        q.to,
        encode(&q.filter)
    );
    if let Some(t) = &q.token {
        req.push_str(&format!("Authorization: Bearer {t}\r\n"));
    }
    req.push_str("\r\n");
    conn.write_all(req.as_bytes())
        .and_then(|()| conn.flush())
        .map_err(|e| tls_err("cannot send the request", e))?;
    let mut r = BufReader::with_capacity(1 << 20, conn);
    let (status, headers) = read_head(&mut r).map_err(|e| match e.kind() {
        std::io::ErrorKind::TimedOut => e.to_string(),
        _ => tls_err("bad response", e),
    })?;
    let code = status.split(' ').nth(1).unwrap_or("");
    if code != "200" {
        let mut body = String::new();
        let _ = r.take(4096).read_to_string(&mut body);
        return Err(format!("{status}: {}", body.trim()));
    }
    let chunked = headers
        .iter()
        .any(|(k, v)| k == "transfer-encoding" && v.eq_ignore_ascii_case("chunked"));
    if !chunked {
        return Err("the response is not chunked (is this weir serve?)".into());
    }
    let notices = headers
        .iter()
        .filter(|(k, _)| k == "x-weir-notice")
        .map(|(_, v)| v.clone())
        .collect();
    let damaged = headers
        .iter()
        .any(|(k, v)| k == "x-weir-damaged" && v == "1");
    let body: Box<dyn Read + Send> = Box::new(ChunkedReader::new(r));
    let reader = FileReader::from_reader(url, body).map_err(|e| format!("{e}"))?;
    Ok((reader, notices, damaged))
}

/// One sensor's thread: open, then send the packets in batches.
fn fetch(url: String, q: RemoteQuery, format: FileFormat, tx: std::sync::mpsc::SyncSender<Msg>) {
    let (mut reader, notices, damaged) = match open(&url, &q, format) {
        Ok(x) => x,
        Err(e) => {
            let _ = tx.send(Msg::Failed(e));
            return;
        }
    };
    if tx
        .send(Msg::Start(reader.interfaces().to_vec(), notices, damaged))
        .is_err()
    {
        return;
    }
    let mut batch = Vec::with_capacity(512);
    loop {
        match reader.next_packet() {
            Ok(Some(p)) => {
                let comments = p.options.comments().map(<[u8]>::to_vec).collect();
                batch.push((p.meta, p.data.to_vec(), comments));
                if batch.len() == 512 && tx.send(Msg::Batch(std::mem::take(&mut batch))).is_err() {
                    return;
                }
            }
            Ok(None) => break,
            Err(e) => {
                let _ = tx.send(Msg::Batch(batch));
                let _ = tx.send(Msg::Failed(format!("{e:#}")));
                return;
            }
        }
    }
    let _ = tx.send(Msg::Batch(batch));
    let _ = tx.send(Msg::End);
}

/// A sensor's stream in the merge.
struct Stream {
    rx: Receiver<Msg>,
    batch: std::collections::VecDeque<Fetched>,
    open: bool,
    /// Its first interface's index in the output.
    offset: u32,
}

impl Stream {
    /// Makes sure a packet is at the front unless the stream ended; failures go to `rep`.
    fn fill(&mut self, rep: &mut SensorReport) {
        while self.open && self.batch.is_empty() {
            match self.rx.recv() {
                Ok(Msg::Batch(b)) => self.batch.extend(b),
                Ok(Msg::End) => self.open = false,
                Ok(Msg::Failed(e)) => {
                    rep.error = Some(e);
                    self.open = false;
                }
                Ok(Msg::Start(..)) | Err(_) => {
                    if rep.error.is_none() {
                        rep.error = Some("its reader stopped".into());
                    }
                    self.open = false;
                }
            }
        }
    }
}

/// Asks every sensor for the extract of `q` in parallel and writes their packets merged in time
/// order into `out` in `format`. Returns each sensor's report (in the order given); a sensor's
/// failure is in its report, not an error. Errors are the output's.
pub fn merge<W: Write>(
    urls: &[String],
    q: &RemoteQuery,
    format: FileFormat,
    out: W,
) -> Result<(W, Vec<SensorReport>), MergeError> {
    let mut reports: Vec<SensorReport> = urls
        .iter()
        .map(|u| SensorReport {
            url: u.clone(),
            ..SensorReport::default()
        })
        .collect();
    let mut streams = Vec::new();
    for u in urls {
        let (tx, rx) = sync_channel(8);
        let (u, q) = (u.clone(), q.clone());
        std::thread::spawn(move || fetch(u, q, format, tx));
        streams.push(Stream {
            rx,
            batch: Default::default(),
            open: true,
            offset: 0,
        });
    }
    // every sensor's interfaces first
    let mut specs: Vec<Interface> = Vec::new();
    for (s, rep) in streams.iter_mut().zip(&mut reports) {
        match s.rx.recv() {
            Ok(Msg::Start(ifaces, notices, damaged)) => {
                s.offset = specs.len() as u32;
                specs.extend(ifaces);
                rep.notices = notices;
                rep.damaged = damaged;
            }
            Ok(Msg::Failed(e)) => {
                rep.error = Some(e);
                s.open = false;
            }
            _ => {
                rep.error = Some("its reader stopped".into());
                s.open = false;
            }
        }
    }
    let pcap = matches!(format, FileFormat::Pcap(_));
    if pcap {
        if specs.windows(2).any(|w| w[0].link != w[1].link) {
            return Err(MergeError::MixedLinks);
        }
        let snaplen = specs.iter().map(|i| i.snaplen).max().unwrap_or(262_144);
        specs.truncate(1);
        if let Some(i) = specs.first_mut() {
            i.snaplen = snaplen;
        }
    }
    if specs.is_empty() {
        specs.push(Interface::new(weir_packet::LinkType::ETHERNET, 262_144));
    }
    let mut w = PacketWriter::new(out, format, &specs)?;
    for (s, rep) in streams.iter_mut().zip(&mut reports) {
        s.fill(rep);
    }
    loop {
        // the earliest front packet; ties to the first sensor
        let mut best: Option<(u64, usize)> = None;
        for (i, s) in streams.iter().enumerate() {
            if let Some((m, ..)) = s.batch.front() {
                if best.is_none_or(|(t, _)| m.ts_ns < t) {
                    best = Some((m.ts_ns, i));
                }
            }
        }
        let Some((_, i)) = best else { break };
        let s = &mut streams[i];
        let Some((meta, data, comments)) = s.batch.pop_front() else {
            break;
        };
        let interface = if pcap { 0 } else { s.offset + meta.interface };
        let meta = PacketMeta { interface, ..meta };
        if comments.is_empty() {
            w.write(&meta, &data)?;
        } else {
            // classic pcap drops them (the sensors were asked for pcap: they sent none)
            w.write_comments(&meta, &data, comments.iter().map(Vec::as_slice))?;
        }
        reports[i].packets += 1;
        s.fill(&mut reports[i]);
    }
    Ok((w.finish()?, reports))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_say_what_each_sensor_did() {
        let ok = SensorReport {
            url: "http://a:1".into(),
            packets: 7,
            notices: vec!["segment 3 damaged".into()],
            damaged: true,
            error: None,
        };
        let down = SensorReport {
            url: "http://b:2".into(),
            error: Some("connection refused".into()),
            ..SensorReport::default()
        };
        assert_eq!(ok.warnings(), ["http://a:1: segment 3 damaged"]);
        assert_eq!(down.warnings(), ["http://b:2: failed: connection refused"]);
        assert!(ok.incomplete() && down.incomplete());
        assert!(!SensorReport::default().incomplete());
        assert_eq!(
            summary(&[ok, down]),
            "1 of 2 sensor(s) answered; packets: http://a:1 7, http://b:2 0"
        );
    }

    #[test]
    fn sensor_urls() {
        assert_eq!(
            host_port("http://127.0.0.1:8080").unwrap(),
            (false, "127.0.0.1:8080".into())
        );
        assert_eq!(
            host_port("http://[::1]:80/").unwrap(),
            (false, "[::1]:80".into())
        );
        assert_eq!(host_port("https://a:1").unwrap(), (true, "a:1".into()));
        assert!(host_port("ftp://a:1").is_err());
        assert!(host_port("http://a:1/extract").is_err());
        assert!(host_port("http://").is_err());
    }

    #[test]
    fn an_unreachable_sensor_is_reported_and_the_output_still_written() {
        // a port nobody listens on: bind one, learn it, close it
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let q = RemoteQuery {
            from: 0,
            to: u64::MAX,
            filter: String::new(),
            token: None,
            silence: DEFAULT_SILENCE,
            min_rate: DEFAULT_MIN_RATE,
            tls: None,
        };
        let urls = [format!("http://127.0.0.1:{port}"), "ftp://x".into()];
        let (out, reps) = merge(&urls, &q, FileFormat::Pcapng, Vec::new()).unwrap();
        assert!(reps[0].error.as_deref().unwrap().contains("cannot connect"));
        assert!(reps[1]
            .error
            .as_deref()
            .unwrap()
            .contains("http://HOST:PORT"));
        let mut r = FileReader::from_bytes("out", out).unwrap();
        assert!(r.next_packet().unwrap().is_none());
    }

    /// A sensor that accepts the connection and never answers fails after `silence`, named
    /// with the reason; the merge still ends (with the other sensor's failure beside it).
    #[test]
    fn a_silent_sensor_fails_after_the_silence() {
        let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = silent.local_addr().unwrap().port();
        // holds the accepted connection, sends nothing, until the test ends
        let held = std::thread::spawn(move || silent.accept().map(|(s, _)| s));
        let q = RemoteQuery {
            from: 0,
            to: u64::MAX,
            filter: String::new(),
            token: None,
            silence: Duration::from_millis(300),
            min_rate: DEFAULT_MIN_RATE,
            tls: None,
        };
        let urls = [format!("http://127.0.0.1:{port}"), "ftp://x".into()];
        let (_, reps) = merge(&urls, &q, FileFormat::Pcapng, Vec::new()).unwrap();
        let err = reps[0].error.as_deref().unwrap();
        assert_eq!(
            err, "the sensor sent nothing for 0.3 s (--sensor-timeout)",
            "{reps:?}"
        );
        assert!(reps[1].error.is_some());
        drop(held.join());
    }
}
