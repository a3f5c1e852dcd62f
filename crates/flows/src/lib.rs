//! weir's flow meter: a flow cache sharded by address, with idle, active, TCP FIN/RST and
//! eviction expiry in packet time, producing [`FlowRecord`]s for the exporters.
//!
//! * [`Meter`] is the whole pipeline (a reader stage on the caller's thread or on range
//!   threads, the shards, one exporter thread owning the [`RecordSink`]); [`Config`] its
//!   settings. Each shard is a state machine of its own (counters, fragment table, flow table,
//!   expiry rules) with time passed in; the meter schedules them: inline, one worker thread
//!   each, or run by the threads reading a file on every core ([`meter_parallel`]).
//! * [`FlowTable`] is one shard's flow table: a preallocated slab of 120-byte entries (both
//!   directions of a flow in one entry), a 4/3-sized hash index of `u32` buckets, and intrusive
//!   lists that make every expiry O(1). At full capacity a flow costs 125.3 bytes
//!   ([`FlowTable::bytes_per_flow`]); a run whose packets carry the rules' tags adds a side
//!   table of 2 bytes per flow (an index into the shard's table of distinct tags).
//! * [`Key`] is the canonical 40-byte key (both directions equal) and [`KeyHasher`] its per-run
//!   seeded hash, which is symmetric because it hashes the canonical key.
//! * [`Preparer`] turns a frame into a [`Prepared`] packet (key, hash, counters' inputs) with no
//!   shared state, on any thread: a hand-written parser for the common shapes, the decoder for
//!   the rest. [`Meter::packet_prepared`] is the in-order, stateful step, done per shard
//!   (fragment attribution through the shard's [`FragTable`], counters, table, expiry);
//!   [`Meter::packet`] does both. A [`Router`] sorts prepared packets by shard (by addresses, so
//!   fragments meet their flow) on any thread, for [`Meter::feed`].
//! * [`FileMeter`] feeds a meter the inputs of a run one after the other; [`meter_parallel`]
//!   meters one large pcap file on every core ([`mod@file`]).
//! * [`LiveMeter`] runs a meter on its own thread over the live packet buffer
//!   (`weir_buffer::Reader`), expiring flows on the wall clock it is given when traffic pauses;
//!   [`meter_live`] runs it over a capture pipeline until told to stop ([`live`]).
//! * [`MeterStats::summary`] and [`MeterStats::to_json`] say what a run counted ([`report`]).
//!
//! ```
//! use weir_flows::{Config, Meter};
//! use weir_packet::LinkType;
//!
//! // raw IPv4: 10.0.0.1:1000 -> 10.0.0.2:53 over UDP, 32 bytes, then the answer
//! let q = [0x45u8, 0, 0, 32, 0, 1, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
//!          0x03, 0xe8, 0, 53, 0, 12, 0, 0, 1, 2, 3, 4];
//! let mut a = q;
//! a[12..16].copy_from_slice(&[10, 0, 0, 2]);
//! a[16..20].copy_from_slice(&[10, 0, 0, 1]);
//! a[20..24].copy_from_slice(&[0, 53, 0x03, 0xe8]);
//! let cfg = Config { biflow: true, ..Config::default() };
//! let mut meter = Meter::new(&cfg, Vec::new());
//! meter.packet(LinkType::IPV4, 1_000, &q);
//! meter.packet(LinkType::IPV4, 2_000, &a);
//! let done = meter.finish();
//! assert_eq!(done.sink.len(), 1);
//! let r = done.sink[0];
//! assert_eq!((r.key.src_port, r.key.dst_port), (1000, 53));
//! assert_eq!((r.forward.packets, r.reverse.packets, r.forward.bytes), (1, 1, 32));
//! ```
#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod file;
pub mod frag;
pub mod index;
pub mod key;
pub mod live;
pub mod meter;
pub mod prepare;
pub mod record;
pub mod report;
pub mod route;
mod shard;
pub mod table;

#[cfg(test)]
mod tests;

pub use file::{meter_parallel, FileMeter, ParallelRun};
pub use frag::FragTable;
pub use key::{Key, KeyHasher, RawKey};
pub use live::{
    comment_tag, meter_live, meter_live_polling, wall_clock_ns, LiveError, LiveMeter, LiveRun,
    Metered, TopBy, TopError, TopFlow, TopFlows, TopFlowsHandle,
};
pub use meter::{
    Config, Finished, Meter, MeterStats, RecordSink, TooManyFlows, MAX_FLOWS_PER_WORKER,
    RANGE_BYTES,
};
pub use prepare::{Prepared, Preparer};
pub use record::{Direction, EndReason, FlowKey, FlowRecord, Tag};
pub use route::{Routed, Router};
pub use table::{FlowTable, OpenFlow, TableConfig, TableStats};
