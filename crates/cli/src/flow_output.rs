//! The flow meter's options turned into library configs, shared by `weir flows` and `weir record
//! --flows`: the outputs they name ([`outputs`], a `weir_export::Outputs`) and the timeouts
//! ([`ns`]). Both meters run in weir-sensor's jobs.

use std::path::Path;
use std::str::FromStr;

use anyhow::{Context, Result};
use weir_export::{NetflowFormat, NetflowOutput, Outputs, Target};

use crate::args::FlowFormat;

/// Nanoseconds of a duration in seconds (already in range: [`crate::args::seconds`]).
pub(crate) fn ns(seconds: f64) -> u64 {
    (seconds * 1e9).round() as u64
}

/// The outputs the options name (JSON lines on stdout when none is); `tags`: a run with rules,
/// whose records carry tags (a CSV `tag` column, applicationName in v9/IPFIX templates).
pub(crate) fn outputs(
    export: Option<&str>,
    format: FlowFormat,
    (biflow, ts_nanos, tags): (bool, bool, bool),
    json: Option<&Path>,
    csv: Option<&Path>,
) -> Result<Outputs> {
    let netflow = match export {
        Some(t) => Some(NetflowOutput {
            target: Target::from_str(t).with_context(|| format!("--export {t}"))?,
            label: t.to_owned(),
            format: match format {
                FlowFormat::V5 => NetflowFormat::V5,
                FlowFormat::V9 => NetflowFormat::V9,
                FlowFormat::Ipfix => NetflowFormat::Ipfix,
            },
            biflow,
            ts_nanos,
        }),
        None => None,
    };
    Ok(Outputs {
        netflow,
        csv: csv.map(Path::to_path_buf),
        json: json.map(Path::to_path_buf),
        kafka: None,
        parquet: None,
        tags,
    })
}
