//! One module per subcommand.

pub(crate) mod capture;
pub(crate) mod ctl;
pub(crate) mod decode;
pub(crate) mod extract;
pub(crate) mod flows;
pub(crate) mod gen;
pub(crate) mod http;
pub(crate) mod info;
pub(crate) mod inventory;
pub(crate) mod lab;
pub(crate) mod latency;
pub(crate) mod read;
pub(crate) mod record;
pub(crate) mod rules;
pub(crate) mod run;
pub(crate) mod serve;
pub(crate) mod stream;
pub(crate) mod top;
pub(crate) mod voip;
