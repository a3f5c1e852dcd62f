//! The flow meter (work in progress; see `record` for the contract with the exporters).
#![deny(missing_docs)]

pub mod record;

pub use record::{Direction, EndReason, FlowKey, FlowRecord};
