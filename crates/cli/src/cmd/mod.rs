//! One module per subcommand.

pub mod capture;
pub mod decode;
pub mod extract;
pub mod flows;
pub mod gen;
pub mod info;
pub mod inventory;
pub mod lab;
pub mod latency;
pub mod read;
pub mod record;
