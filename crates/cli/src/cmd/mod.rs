//! One module per subcommand, plus the input loop they share.

pub mod capture;
pub mod decode;
pub mod extract;
pub mod flows;
pub mod gen;
pub mod info;
pub mod input;
pub mod inventory;
pub mod lab;
pub mod latency;
pub mod ordered;
pub mod read;
pub mod record;
