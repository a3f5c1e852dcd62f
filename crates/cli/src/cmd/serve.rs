//! `weir serve`: a store's extract, listing and health over HTTP (or HTTPS with client
//! certificates) for `weir extract --sensor` (the work is `weir_store::serve`). Loopback only
//! unless `--token` or `--client-ca` is given.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Result;
use weir_store::serve::{ServeConfig, Server, TlsFiles};

use crate::output::Status;

/// Arguments of `weir serve`.
#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    /// Store directory to serve.
    #[arg(long, value_name = "DIR")]
    store: PathBuf,
    /// Address to listen on; a non-loopback address needs --token or --client-ca.
    #[arg(long, value_name = "ADDR:PORT", default_value = "127.0.0.1:8614")]
    listen: SocketAddr,
    /// Bearer token every request must carry (`Authorization: Bearer TOKEN`).
    #[arg(long, value_name = "TOKEN", value_parser = crate::args::token)]
    token: Option<String>,
    /// Serve HTTPS with this certificate (PEM, the chain from the server's own first).
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The certificate's private key (PEM).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Require of every client a certificate signed by this CA (PEM).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    client_ca: Option<PathBuf>,
    /// Seconds a write to a client may block (it reads nothing) before its answer and
    /// connection are dropped and counted (`clients_dropped` in /health), 1 to 86400.
    #[arg(long, value_name = "S", default_value_t = 60,
          value_parser = clap::value_parser!(u64).range(1..=86_400),
          allow_negative_numbers = true)]
    write_timeout: u64,
}

/// Runs `weir serve` until killed; says where it listens on stderr.
pub(crate) fn run(args: Args) -> Result<Status> {
    let tls = match (args.tls_cert, args.tls_key) {
        (Some(cert), Some(key)) => Some(TlsFiles {
            cert,
            key,
            client_ca: args.client_ca,
        }),
        _ => None,
    };
    let server = Server::bind(&ServeConfig {
        store: args.store.clone(),
        listen: args.listen,
        token: args.token,
        tls,
        write_timeout: std::time::Duration::from_secs(args.write_timeout),
    })?;
    eprintln!("weir serve: {} on {}", args.store.display(), server.url());
    server.run();
    Ok(Status::Clean)
}
