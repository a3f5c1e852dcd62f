//! SIGINT and SIGTERM (and SIGHUP, a closed terminal, unless a command reloads on it: then
//! [`weir_capture::signal::on_hangup`] takes it over), for every command: one thread waits for
//! them ([`install`], from `main`).
//!
//! A live command (and `gen`, `run`) gives a stop flag ([`on_stop`]): the first signal sets it,
//! and the command ends as it would at its own end (outputs committed, summary printed, exit 0).
//! Any other command, or a second signal, ends the process at once: the temporary files of the
//! outputs still open are removed first ([`weir_packet::output::remove_temps`]: a file being
//! written keeps what it held before the run, and no `OUT.weir-tmp-PID` is left), then the exit
//! status is 128 + the signal's number (130 for SIGINT, 143 for SIGTERM, 129 for SIGHUP), as
//! shells report a command a signal ended.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use anyhow::{Context, Result};
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::Signals;

/// The flag the running command ends on, if it gave one.
static STOP: Mutex<Option<Arc<AtomicBool>>> = Mutex::new(None);

/// Starts the thread that handles SIGINT and SIGTERM (see the module documentation).
pub(crate) fn install() -> Result<()> {
    let mut signals =
        Signals::new([SIGINT, SIGTERM, SIGHUP]).context("cannot install the signal handler")?;
    std::thread::Builder::new()
        .name("weir-signals".into())
        .spawn(move || {
            for sig in signals.forever() {
                on_signal(sig);
            }
        })
        .context("cannot start the signal thread")?;
    Ok(())
}

/// What one signal does: sets the stop flag the first time, else ends the process.
fn on_signal(sig: i32) {
    let stop = STOP.lock().unwrap_or_else(PoisonError::into_inner).clone();
    if let Some(flag) = stop {
        if !flag.swap(true, Ordering::Relaxed) {
            return;
        }
    }
    weir_packet::output::remove_temps();
    std::process::exit(128 + sig);
}

/// The running command ends on `flag`: the first SIGINT/SIGTERM sets it (a second one ends the
/// process at once).
pub(crate) fn on_stop(flag: Arc<AtomicBool>) {
    *STOP.lock().unwrap_or_else(PoisonError::into_inner) = Some(flag);
}
