//! weir's rule engine: PF_RING's exact and wildcard rules, HPCAP's byte filters, Aho-Corasick
//! payload patterns and BPF, with actions (pass, drop, slice, sample, per-flow cutoff, tag,
//! learn), per-rule and per-thread counters, and rule sets swapped live.
//!
//! ```
//! use weir_rules::{fields_from_frame, Engine, Outcome, RuleSet};
//! use weir_decode::{Decoded, LinkType};
//!
//! let set = RuleSet::parse(
//!     "exact tcp 10.0.0.9:5000 10.0.0.1:873 -> drop   # the noisy backup\n\
//!      src 10.1.0.0/16 -> tag lab pass\n\
//!      any -> cutoff 4k\n",
//! )
//! .unwrap();
//! let engine = Engine::new(set, LinkType::ETHERNET, 262_144).unwrap();
//! let mut ev = engine.evaluator(); // one per packet thread
//!
//! // Ethernet, IPv4 10.0.0.1 -> 10.0.0.9, TCP 873 -> 5000: the backup, other direction
//! let mut frame = vec![0u8; 54];
//! frame[12..14].copy_from_slice(&[0x08, 0x00]);
//! frame[14..34].copy_from_slice(&[0x45, 0, 0, 40, 0, 0, 0, 0, 64, 6, 0, 0, 10, 0, 0, 1, 10, 0, 0, 9]);
//! frame[34..38].copy_from_slice(&[0x03, 0x69, 0x13, 0x88]);
//! frame[46] = 0x50;
//! let mut scratch = Decoded::new();
//! let f = fields_from_frame(&mut scratch, LinkType::ETHERNET, &frame, 54);
//! assert_eq!(ev.eval(&f, &frame).outcome, Outcome::Dropped);
//! assert!(engine.totals().reconciles());
//! ```
//!
//! # The rule file
//!
//! One rule per line; `#` starts a comment; words are separated by blanks; quoted strings take
//! `\\ \" \n \r \t \xNN` escapes. A line is `[id N] [prio N] MATCH... -> ACTION...`, or an
//! option. `RULES.md` beside this crate has the full reference and worked examples.
//!
//! * `exact PROTO A[:PORT] B[:PORT] [vlan N]`: one conversation, both directions (IPv6 as
//!   `[2001:db8::1]:80`). Goes to the exact hash table; exact rules always stop.
//! * Wildcard terms, AND-ed, any left out is "any": `ip4`, `ip6`, `vlan N|none`,
//!   `proto tcp|udp|icmp|icmp6|sctp|N`, `src CIDR`, `dst CIDR`, `host CIDR` (either side),
//!   `sport A[-B]`, `dport A[-B]`, `port A[-B]` (either side), `flags SET/MASK` (TCP flag letters
//!   `FSRPAUEC`), `len A-B` (length on the wire), `bytes [!]BASE+OFF=HEX[/MASK]` (BASE `l2`,
//!   `l3`, `l4` or `pl`; several are AND-ed), `payload "text"` / `payload hex:4745` (several:
//!   any one), `bpf "libpcap expression"`, or `any` alone.
//! * Actions: one verdict among `pass`, `drop`, `slice N|l2|l3|l4`, `sample N`, `cutoff SIZE`
//!   and/or `cutoff-packets N` (per flow); `tag N|word|"text"` (≤ 15 bytes); `stop` (default) or
//!   `continue`; `learn ACTIONS...` last: pass this packet and give the rest of its flow
//!   `ACTIONS` without consulting the wildcard rules.
//! * Options: `default pass|drop`, `set scan-limit SIZE` (payload bytes scanned per flow and
//!   direction, default 16k), `set flows N` (flow table size per thread, default 65536).
//!
//! `id` defaults to the line number; rules are evaluated by ascending `prio` (default 0), then
//! file order. See [`engine`](mod@engine) for the order of evaluation and how verdicts combine,
//! [`patterns`](mod@patterns) for payload matching across packets (retransmissions, gaps).
//!
//! # Threads and live changes
//!
//! [`Engine`] is `Clone + Send + Sync`. Each packet thread takes an [`Evaluator`] (its own
//! counter block and flow table). [`Engine::replace`] swaps a whole new rule set,
//! [`Engine::add_exact`] / [`Engine::del_exact`] change exact rules; evaluators pick the new
//! version at their next packet, and each packet is decided under one version only.
//! [`Engine::stats`] sums the per-thread counters.
//!
//! # Where the packet fields come from
//!
//! [`PacketFields`] is a small `Copy` struct; [`fields`](fn@fields) (or [`fields_from_frame`], reusing a
//! scratch `Decoded`) fills it with weir-decode's fast header parser, and with the full decoder
//! for the frames that parser leaves to it. The capture path may fill it from any parser.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod check;
pub mod counters;
mod display;
pub mod engine;
mod exact;
pub mod fields;
pub mod file;
pub mod kernel;
mod parse;
pub mod patterns;
pub mod rule;
mod wild;

pub use crate::counters::{RuleStats, Totals};
pub use crate::engine::{
    BuildError, Decision, Engine, Evaluator, ExactRule, KernelView, ListedRule, Listing, Outcome,
    ReloadStats, Stats, WildStats,
};
pub use crate::exact::SHARDS;
pub use crate::fields::{
    fields, fields_from_decoded, fields_from_frame, PacketFields, NO_OFFSET, NO_VLAN,
};
pub use crate::file::{FileError, RulesFile};
pub use crate::kernel::{
    kernel_drops, kernel_drops_snap, KernelDrops, MIN_KERNEL_SNAPLEN, WHOLE_PACKET,
};
pub use crate::parse::ParseError;
pub use crate::rule::{
    Action, Base, ByteMatch, ExactKey, Match, Options, PortRange, Prefix, Rule, RuleId, RuleSet,
    SliceTo, Tag, Verdict, WildMatch,
};
