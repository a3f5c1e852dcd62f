//! The command line's shared parts: the argument groups several subcommands flatten and their
//! checks ([`weir_sensor::args`]), and the value parsers every number goes through
//! ([`weir_packet::value`]: durations, rates, sizes, counts, finite and in range, or a usage
//! error naming the limit) before anything is opened, created or allocated.

pub(crate) use weir_packet::value::{count, seconds, time};
pub(crate) use weir_sensor::args::{
    no_stdin, Expr, Format, Inputs, LiveArgs, Output, RulesArgs, Source,
};

/// A bearer token (`weir serve --token`, `weir extract --token`): 1 to 4096 visible ASCII
/// characters, what an `Authorization` header carries as sent (a space or a line end could not
/// be: the server trims the header's value, and a line end would start another header).
pub(crate) fn token(s: &str) -> Result<String, String> {
    if s.is_empty() || s.len() > 4096 || !s.bytes().all(|b| b.is_ascii_graphic()) {
        return Err("give 1 to 4096 visible ASCII characters (no space, no control)".into());
    }
    Ok(s.to_owned())
}
