//! Where command output goes (a file or stdout) and how run-time outcomes become exit statuses.

use std::fs::File;
use std::io::{self, Write};
use std::path::Path;

use anyhow::{Context, Result};

/// The outcome of a command that ran to its end: `Clean`, or `Damaged` when some input could not
/// be read entirely (the command still processed every readable packet).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// Everything was read.
    Clean,
    /// Some input was damaged or unreadable; warnings were printed.
    Damaged,
}

impl From<Status> for std::process::ExitCode {
    fn from(s: Status) -> Self {
        match s {
            Status::Clean => std::process::ExitCode::SUCCESS,
            Status::Damaged => std::process::ExitCode::from(1),
        }
    }
}

/// Opens `path` for writing, `-` meaning stdout.
pub fn create(path: &Path) -> Result<Box<dyn Write + Send>> {
    if path.as_os_str() == "-" {
        Ok(Box::new(io::stdout()))
    } else {
        let f = File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
        Ok(Box::new(f))
    }
}

/// True when the error chain ends in a broken pipe (the reader of our stdout went away).
pub fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|e| {
        e.downcast_ref::<io::Error>()
            .is_some_and(|e| e.kind() == io::ErrorKind::BrokenPipe)
            || e.downcast_ref::<weir_store::WriteError>().is_some_and(
                |e| matches!(e, weir_store::WriteError::Io(io) if io.kind() == io::ErrorKind::BrokenPipe),
            )
    })
}

/// Prints a warning about a damaged input; the command goes on with its next input.
pub fn warn_damage(err: &weir_source::ReadError) {
    eprintln!("weir: warning: {err}");
}

/// The reader's next packet. Damage ends this input like its end (`None`), with a warning and
/// `status` set to [`Status::Damaged`]; other read errors are returned.
pub fn next_or_damaged<'r>(
    r: &'r mut weir_source::FileReader,
    status: &mut Status,
) -> Result<Option<weir_source::Packet<'r>>> {
    match r.next_packet() {
        Ok(p) => Ok(p),
        Err(e @ weir_source::ReadError::Damaged { .. }) => {
            warn_damage(&e);
            *status = Status::Damaged;
            Ok(None)
        }
        Err(e) => Err(e.into()),
    }
}
