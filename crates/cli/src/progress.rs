//! A progress bar for long offline jobs, shown only when stderr is a terminal and the input has a
//! known size; updated every few thousand packets so it costs nothing measurable.

use std::io::IsTerminal;
use std::path::Path;

use indicatif::{ProgressBar, ProgressStyle};

/// A byte-offset progress bar over one input file, or nothing.
pub(crate) struct Progress {
    bar: Option<ProgressBar>,
}

impl Progress {
    /// A bar for reading `path`, when stderr is a terminal and the file is regular and large.
    pub(crate) fn for_file(path: &Path) -> Progress {
        let size = std::fs::metadata(path)
            .ok()
            .filter(|m| m.is_file())
            .map(|m| m.len());
        let bar = match size {
            Some(size) if size > (64 << 20) && std::io::stderr().is_terminal() => {
                let bar = ProgressBar::new(size);
                bar.set_style(
                    ProgressStyle::with_template(
                        "{bar:40} {bytes}/{total_bytes} {binary_bytes_per_sec} eta {eta}",
                    )
                    .expect("static template"),
                );
                Some(bar)
            }
            _ => None,
        };
        Progress { bar }
    }

    /// Reports that the reader is at byte `offset` (the read loop says so every
    /// [`weir_sensor::read::PROGRESS_EVERY`] packets).
    pub(crate) fn tick(&self, offset: u64) {
        if let Some(bar) = &self.bar {
            bar.set_position(offset);
        }
    }

    /// Removes the bar.
    pub(crate) fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}
