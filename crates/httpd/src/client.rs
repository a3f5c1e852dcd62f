//! The client's connection: TCP with a connect timeout, then TLS when given a configuration
//! (the server's name taken from the host: an IP address or a DNS name), read under a [`Pace`]:
//! a server that sends nothing for a while, or drips its answer slower than a minimum rate, is
//! failed instead of holding the client for ever.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::pki_types::ServerName;

/// A connection to read and write: plain TCP or TLS.
pub trait Connection: Read + Write + Send {}

impl<T: Read + Write + Send> Connection for T {}

/// How slow a server may be before a read of its connection fails (with
/// [`io::ErrorKind::TimedOut`] and a message saying which limit and which option sets it).
///
/// The rate is checked over consecutive windows of `silence` (curl's `--speed-limit` over
/// `--speed-time`): a window ends at the first byte read once it is `silence` old, and fails
/// when it brought fewer than `min_rate` bytes per second on average. A server that drips one
/// byte just before every `silence` is thus failed within about two windows. The check is on
/// the raw TCP bytes, under TLS, so a dripped handshake is failed too.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pace {
    /// The longest the server may send nothing.
    pub silence: Duration,
    /// The fewest bytes per second the server must send over each window of `silence`
    /// (0: no minimum).
    pub min_rate: u64,
    /// Who the server is, for messages ("the sensor").
    pub who: &'static str,
    /// The options that set `silence` and `min_rate`, for messages.
    pub options: (&'static str, &'static str),
}

/// A TCP stream whose reads fail when the server is slower than its [`Pace`].
struct Paced {
    inner: TcpStream,
    pace: Pace,
    /// When the current window began.
    window: Instant,
    /// Bytes read in the current window.
    bytes: u64,
}

impl Paced {
    fn new(inner: TcpStream, pace: Pace) -> Paced {
        Paced {
            inner,
            pace,
            window: Instant::now(),
            bytes: 0,
        }
    }

    /// Counts `n` bytes read; fails when a window that has run its length brought too few.
    fn count(&mut self, n: usize) -> io::Result<()> {
        self.bytes += n as u64;
        let age = self.window.elapsed();
        if age < self.pace.silence {
            return Ok(());
        }
        let needed = self.pace.min_rate as f64 * age.as_secs_f64();
        if (self.bytes as f64) < needed {
            let p = &self.pace;
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "{} sent {} byte(s) in {:.1} s, slower than {} bytes/s ({})",
                    p.who,
                    self.bytes,
                    age.as_secs_f64(),
                    p.min_rate,
                    p.options.1
                ),
            ));
        }
        self.window = Instant::now();
        self.bytes = 0;
        Ok(())
    }
}

impl Read for Paced {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self.inner.read(buf) {
            Ok(n) => {
                self.count(n)?;
                Ok(n)
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                let p = &self.pace;
                Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "{} sent nothing for {} s ({})",
                        p.who,
                        p.silence.as_secs_f64(),
                        p.options.0
                    ),
                ))
            }
            Err(e) => Err(e),
        }
    }
}

impl Write for Paced {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.inner.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// Connects to `addr` within `connect_timeout`; reads are then held to `pace`.
/// With `tls`, the connection is TLS to the server named `host` (`HOST` of `HOST:PORT`,
/// brackets of an IPv6 address allowed); the handshake happens on the first read or write.
pub fn connect(
    addr: SocketAddr,
    host: &str,
    tls: Option<&Arc<rustls::ClientConfig>>,
    connect_timeout: Duration,
    pace: Pace,
) -> io::Result<Box<dyn Connection>> {
    let s = TcpStream::connect_timeout(&addr, connect_timeout)?;
    s.set_read_timeout(Some(pace.silence))?;
    let s = Paced::new(s, pace);
    let Some(config) = tls else {
        return Ok(Box::new(s));
    };
    let name = host.trim_start_matches('[').trim_end_matches(']');
    let name = ServerName::try_from(name.to_owned())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("{host}: {e}")))?;
    let conn = rustls::ClientConnection::new(config.clone(), name)
        .map_err(|e| io::Error::other(format!("TLS: {e}")))?;
    Ok(Box::new(rustls::StreamOwned::new(conn, s)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    const PACE: Pace = Pace {
        silence: Duration::from_millis(300),
        min_rate: 100,
        who: "the server",
        options: ("--silence", "--min-rate"),
    };

    /// A server that drips a byte every 100 ms (never silent for 300 ms) sends about 3 bytes
    /// per window where 30 are needed (100 bytes/s × 0.3 s): the read fails, naming the rate.
    #[test]
    fn a_dripping_server_is_failed_for_its_rate() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let drip = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            // until the client goes away
            while s.write_all(b"x").is_ok() {
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        let mut c = connect(addr, "127.0.0.1", None, Duration::from_secs(5), PACE).unwrap();
        let mut buf = [0u8; 16];
        let err = loop {
            match c.read(&mut buf) {
                Ok(0) => panic!("the server ended"),
                Ok(_) => {}
                Err(e) => break e,
            }
        };
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        let msg = err.to_string();
        assert!(msg.starts_with("the server sent "), "{msg}");
        assert!(
            msg.ends_with("slower than 100 bytes/s (--min-rate)"),
            "{msg}"
        );
        drop(c);
        drip.join().unwrap();
    }

    /// A server that sends nothing fails the read after the silence, naming its option; one
    /// that sends a whole answer at once is read to its end.
    #[test]
    fn silence_fails_and_a_prompt_answer_is_read() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let mut c = connect(addr, "127.0.0.1", None, Duration::from_secs(5), PACE).unwrap();
        let (_quiet, _) = l.accept().unwrap();
        let err = c.read(&mut [0u8; 4]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "the server sent nothing for 0.3 s (--silence)"
        );
        let mut c = connect(addr, "127.0.0.1", None, Duration::from_secs(5), PACE).unwrap();
        let (mut s, _) = l.accept().unwrap();
        s.write_all(&[7u8; 5000]).unwrap();
        drop(s);
        let mut all = Vec::new();
        c.read_to_end(&mut all).unwrap();
        assert_eq!(all, vec![7u8; 5000]);
    }
}
