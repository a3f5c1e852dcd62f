//! SIGHUP as a flag: the live commands and `weir run` reload their rules (or config file) when
//! it is set; the handler only stores to an atomic.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};

/// Set by SIGHUP, cleared by the job that reloads.
static HANGUP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_hangup_signal(_: libc::c_int) {
    HANGUP.store(true, Ordering::Relaxed);
}

/// Installs the SIGHUP handler and returns the flag it sets.
pub fn on_hangup() -> io::Result<&'static AtomicBool> {
    // SAFETY: the handler only stores to an atomic (async-signal-safe); `signal` installs it
    // for SIGHUP with glibc's BSD semantics (SA_RESTART: no EINTR elsewhere).
    let old = unsafe {
        libc::signal(
            libc::SIGHUP,
            on_hangup_signal as extern "C" fn(libc::c_int) as libc::sighandler_t,
        )
    };
    if old == libc::SIG_ERR {
        return Err(io::Error::last_os_error());
    }
    Ok(&HANGUP)
}
