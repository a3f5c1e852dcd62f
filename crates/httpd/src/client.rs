//! The client's connection: TCP with a connect timeout, then TLS when given a configuration
//! (the server's name taken from the host: an IP address or a DNS name).

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::ServerName;

/// A connection to read and write: plain TCP or TLS.
pub trait Connection: Read + Write + Send {}

impl<T: Read + Write + Send> Connection for T {}

/// Connects to `addr` within `connect_timeout`; reads then time out after `read_timeout`.
/// With `tls`, the connection is TLS to the server named `host` (`HOST` of `HOST:PORT`,
/// brackets of an IPv6 address allowed); the handshake happens on the first read or write.
pub fn connect(
    addr: SocketAddr,
    host: &str,
    tls: Option<&Arc<rustls::ClientConfig>>,
    connect_timeout: Duration,
    read_timeout: Duration,
) -> io::Result<Box<dyn Connection>> {
    let s = TcpStream::connect_timeout(&addr, connect_timeout)?;
    s.set_read_timeout(Some(read_timeout))?;
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
