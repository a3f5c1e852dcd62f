//! The process's log on stderr ([`weir_sensor::log`]): tracing events as text, or JSON lines
//! with `weir run --log-format json`.

pub(crate) use weir_sensor::log::{init, json_line};
