//! The terminal side of the offline commands' read loop ([`weir_sensor::read`]): its warnings
//! and errors on stderr, a progress bar per large file ([`Progress`]), and the rules' summary
//! after the last file; [`capture_files`], the check of the store commands' inputs.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use weir_pcap::ReadError;
use weir_sensor::read::{self, Observer, ReadConfig, Visitor};
use weir_sensor::Event;

use crate::output::{self, Status};
use crate::progress::Progress;

/// Prints what the read loop says and draws the progress bar of the file being read.
#[derive(Default)]
pub(crate) struct Terminal {
    bar: Option<Progress>,
}

impl Observer for Terminal {
    fn event(&mut self, e: Event) {
        output::event(e);
    }

    fn failed(&mut self, e: &ReadError) {
        eprintln!("weir: error: {e}");
    }

    fn start_file(&mut self, path: &Path) {
        self.bar = Some(Progress::for_file(path));
    }

    fn progress(&mut self, _packets: u64, offset: u64) {
        if let Some(bar) = &self.bar {
            bar.tick(offset);
        }
    }

    fn end_file(&mut self) {
        if let Some(bar) = self.bar.take() {
            bar.finish();
        }
    }
}

/// The status of a read that was (not) `damaged`.
pub(crate) fn status(damaged: bool) -> Status {
    if damaged {
        Status::Damaged
    } else {
        Status::Clean
    }
}

/// Runs `visitor` over the packets of `cfg` ([`weir_sensor::read::run`]) and prints the rules'
/// summary, if any.
pub(crate) fn read<V: Visitor>(cfg: &ReadConfig, visitor: &mut V) -> Result<Status>
where
    anyhow::Error: From<V::Error>,
{
    let report = read::run(cfg, visitor, &mut Terminal::default())?;
    if let Some(rules) = &report.rules {
        eprintln!("{rules}");
    }
    Ok(status(report.damaged))
}

/// [`read`] of `files` with the filter `expr` and no rules.
pub(crate) fn read_filtered<V: Visitor>(
    files: &[PathBuf],
    expr: String,
    visitor: &mut V,
) -> Result<Status>
where
    anyhow::Error: From<V::Error>,
{
    let cfg = ReadConfig {
        files: files.to_vec(),
        filter: expr,
        ..ReadConfig::default()
    };
    read(&cfg, visitor)
}

/// Checks the inputs named on a store command's line (`weir index`, `weir extract`): each is a
/// directory (a store, checked when read) or a capture file. A device, a FIFO, an empty file or
/// a file that is not pcap or pcapng is an error naming it (exit 1), before anything is done;
/// inside a store, such a file is a warning and the others are read.
pub(crate) fn capture_files<'a>(inputs: impl IntoIterator<Item = &'a PathBuf>) -> Result<()> {
    use std::os::unix::fs::FileTypeExt;
    for p in inputs {
        let name = p.display();
        let m = std::fs::metadata(p).with_context(|| format!("cannot open {name}"))?;
        let t = m.file_type();
        let not = match () {
            _ if t.is_dir() => continue,
            _ if t.is_char_device() => "a character device",
            _ if t.is_block_device() => "a block device",
            _ if t.is_fifo() => "a FIFO",
            _ if t.is_socket() => "a socket",
            _ if m.len() == 0 => "an empty file",
            _ => {
                weir_pcap::FileReader::open(p)?;
                continue;
            }
        };
        bail!("{name}: not a pcap or pcapng file ({not})");
    }
    Ok(())
}
