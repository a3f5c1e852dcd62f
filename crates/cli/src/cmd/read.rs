//! `weir read`: filter and convert capture files, like `tcpdump -r IN -w OUT EXPR`; without `-w`,
//! print one line per matching packet. With `--rules FILE`, the rule engine then drops, slices,
//! samples and tags the packets the expression passed; tags go into the pcapng packet comment
//! (classic pcap has no place for them: they are counted, and said once). The loop and the
//! file written are weir-sensor's ([`weir_sensor::read`], [`weir_sensor::convert`]).

use anyhow::Result;
use weir_pcap::FileFormat;
use weir_sensor::convert::Convert;
use weir_sensor::read::ReadConfig;

use crate::args::{self, Format};
use crate::input;
use crate::output::{self, Status};

/// Arguments of `weir read`.
#[derive(clap::Args, Debug)]
#[command(mut_arg("files", |a| a.required(true)))]
pub(crate) struct Args {
    #[command(flatten)]
    inputs: args::Inputs,
    #[command(flatten)]
    out: args::Output,
    /// Stop after this many matching packets.
    #[arg(short = 'c', long = "count", value_name = "N", value_parser = args::count,
          allow_negative_numbers = true)]
    count: Option<u64>,
    #[command(flatten)]
    rules: args::RulesArgs,
    #[command(flatten)]
    expr: args::Expr,
}

impl Args {
    /// Usage checks clap cannot express.
    pub(crate) fn check(&self) -> Result<(), String> {
        if self.rules.control.is_some() {
            return Err(
                "--control is for live commands: weir read applies its --rules file \
                        once, to the files it reads"
                    .into(),
            );
        }
        self.out.check(true)
    }
}

/// Runs `weir read`.
pub(crate) fn run(args: Args) -> Result<Status> {
    let format = args.out.format(Format::Pcap);
    let mut cfg = ReadConfig {
        files: args.inputs.files.clone(),
        filter: args.expr.joined(),
        rules: args.rules.rules.clone(),
        // tags are pcapng packet comments; printed lines do not show them
        tags_stored: matches!(format, FileFormat::Pcapng),
    };
    let Some(out_path) = &args.out.path else {
        cfg.tags_stored = false;
        let mut printer = output::lines(args.count);
        let status = input::read(&cfg, &mut printer)?;
        printer.finish()?.commit()?;
        return Ok(status);
    };
    output::check_inputs(&args.inputs.files, Some(out_path))?;
    let out = output::create(out_path)?;
    let mut sink = Convert::new(out, format, args.count);
    let status = input::read(&cfg, &mut sink)?;
    let (out, tags_lost) = sink.finish()?;
    if tags_lost > 0 {
        eprintln!(
            "weir: warning: {tags_lost} tagged packets written without their tags or comments \
             (classic pcap has no packet comments; --format pcapng stores them)"
        );
    }
    out.commit()?;
    Ok(status)
}
