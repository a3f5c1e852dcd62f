//! The command line's shared parts: the argument groups several subcommands flatten and their
//! checks ([`weir_sensor::args`]), and the value parsers every number goes through
//! ([`weir_packet::value`]: durations, rates, sizes, counts, finite and in range, or a usage
//! error naming the limit) before anything is opened, created or allocated.

pub(crate) use weir_packet::value::{count, multiplier, seconds, time};
pub(crate) use weir_sensor::args::{
    first_given, no_stdin, Expr, Format, Inputs, LiveArgs, Output, RulesArgs, Source,
};
