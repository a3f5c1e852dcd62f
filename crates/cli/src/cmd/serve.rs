//! `weir serve`: a store's extract, listing and health over HTTP for `weir extract --sensor`
//! (the work is `weir_store::serve`). Loopback only unless `--token` is given.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Result;
use weir_store::serve::Server;

use crate::output::Status;

/// Arguments of `weir serve`.
#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    /// Store directory to serve.
    #[arg(long, value_name = "DIR")]
    store: PathBuf,
    /// Address to listen on; a non-loopback address needs --token.
    #[arg(long, value_name = "ADDR:PORT", default_value = "127.0.0.1:8614")]
    listen: SocketAddr,
    /// Bearer token every request must carry (`Authorization: Bearer TOKEN`).
    #[arg(long, value_name = "TOKEN")]
    token: Option<String>,
}

/// Runs `weir serve` until killed; says where it listens on stderr.
pub(crate) fn run(args: Args) -> Result<Status> {
    let server = Server::bind(&args.store, args.listen, args.token.as_deref())?;
    eprintln!(
        "weir serve: {} on http://{}",
        args.store.display(),
        server.local_addr()?
    );
    server.run();
    Ok(Status::Clean)
}
