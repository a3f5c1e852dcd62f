//! The `[web]` table of a config file: the read-only web page ([`crate::web`]), off unless
//! set.
//!
//! ```toml
//! [web]
//! listen = "127.0.0.1:9638"   # IP:PORT; nothing listens unless this is given
//! ```

use std::net::SocketAddr;

use serde::Deserialize;
use toml::Spanned;

use super::{ConfigError, Cx};

/// The `[web]` table as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawWeb {
    listen: Spanned<String>,
}

impl Cx<'_> {
    /// The address of the web page.
    pub(super) fn web(&self, w: &RawWeb) -> Result<SocketAddr, ConfigError> {
        crate::web::parse_addr(w.listen.get_ref()).map_err(|_| {
            self.at(
                &w.listen,
                "web.listen",
                format!(
                    "`{}` is not an address IP:PORT (127.0.0.1:9638, [::1]:9638)",
                    w.listen.get_ref()
                ),
            )
        })
    }
}
