//! `--metrics [ADDR]` on the live commands (`weir record`, `weir capture`): Prometheus metrics
//! served at `http://ADDR/metrics` while the job runs (default 127.0.0.1:9637; off unless
//! given). The server is started before capture, so a bad address or a port in use stops the
//! command before anything is captured; the job publishes its counters on the board the server
//! renders ([`weir_sensor::metrics`]).

use std::net::SocketAddr;

use anyhow::Result;
pub(crate) use weir_sensor::metrics::Serving;

/// The metrics option.
#[derive(clap::Args, Debug)]
pub(crate) struct MetricsArgs {
    /// Serve Prometheus metrics at http://ADDR/metrics while running (ADDR is HOST:PORT,
    /// 127.0.0.1:9637 when --metrics is given alone; port 0 picks a free port, printed)
    #[arg(long = "metrics", value_name = "ADDR", num_args = 0..=1,
          default_missing_value = weir_metrics::DEFAULT_ADDR, value_parser = address)]
    addr: Option<SocketAddr>,
}

/// Parses a metrics address (clap's value parser: a bad one is a usage error).
fn address(s: &str) -> Result<SocketAddr, String> {
    weir_metrics::http::parse_addr(s).map_err(|e| e.to_string())
}

impl MetricsArgs {
    /// Starts the server when asked (and says where), else nothing.
    pub(crate) fn start(&self) -> Result<Option<Serving>> {
        let Some(addr) = self.addr else {
            return Ok(None);
        };
        let serving = weir_sensor::metrics::serve(addr)?;
        let at = serving.server.local_addr();
        eprintln!("weir: metrics on http://{at}/metrics");
        Ok(Some(serving))
    }
}
