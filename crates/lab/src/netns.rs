//! Threads inside the bench's namespaces. Network namespaces are per thread: a thread moved
//! into one with `setns()` opens its sockets there, and the threads it starts are there too,
//! while the rest of the process stays where it is. [`spawn_in`] also gives the thread its own
//! mount namespace with the namespace's sysfs on `/sys` (as `ip netns exec` does), so what
//! the libraries read there (an interface's type, MTU, counters) is the namespace's.
//!
//! Every `unsafe` block here is a system call, each with a `// SAFETY:` comment.

use std::ffi::CString;
use std::os::fd::AsRawFd;
use std::thread::JoinHandle;

use crate::LabError;

/// How much of a namespace a thread enters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Enter {
    /// The network namespace only (enough for sockets and netlink).
    Network,
    /// The network namespace, and a private mount namespace with its sysfs on `/sys`.
    WithSysfs,
}

/// Moves the calling thread into network namespace `ns` (a name under /run/netns).
fn enter(ns: &str, how: Enter) -> Result<(), LabError> {
    let path = format!("/run/netns/{ns}");
    let file = std::fs::File::open(&path).map_err(|e| LabError::Io {
        path: path.clone(),
        source: e,
    })?;
    // SAFETY: setns() on a namespace file we hold open; it changes only this thread's network
    // namespace.
    if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        return Err(LabError::Unsupported(format!(
            "setns({path}): {}",
            std::io::Error::last_os_error()
        )));
    }
    if how == Enter::Network {
        return Ok(());
    }
    let os = |what: &str| {
        LabError::Unsupported(format!(
            "{what} for namespace {ns}: {}",
            std::io::Error::last_os_error()
        ))
    };
    // SAFETY: unshare() with a constant flag: this thread gets its own copy of the mount
    // namespace (and of its filesystem attributes); no memory is passed.
    if unsafe { libc::unshare(libc::CLONE_NEWNS) } != 0 {
        return Err(os("unshare(CLONE_NEWNS)"));
    }
    let root = CString::new("/").expect("no NUL");
    let sys = CString::new("/sys").expect("no NUL");
    let none = CString::new("none").expect("no NUL");
    let sysfs = CString::new("sysfs").expect("no NUL");
    let name = CString::new(ns).map_err(|_| LabError::Config(format!("bad namespace {ns}")))?;
    // SAFETY: the strings are valid NUL-terminated and outlive the calls; `data` is null. The
    // first call makes this thread's mounts slaves, so nothing below reaches the host's.
    unsafe {
        if libc::mount(
            none.as_ptr(),
            root.as_ptr(),
            std::ptr::null(),
            libc::MS_SLAVE | libc::MS_REC,
            std::ptr::null(),
        ) != 0
        {
            return Err(os("mount --make-rslave /"));
        }
        // /sys may not be mounted at all: then there is nothing to detach.
        libc::umount2(sys.as_ptr(), libc::MNT_DETACH);
        if libc::mount(
            name.as_ptr(),
            sys.as_ptr(),
            sysfs.as_ptr(),
            0,
            std::ptr::null(),
        ) != 0
        {
            return Err(os("mount sysfs"));
        }
    }
    Ok(())
}

/// Starts a thread named `name` inside namespace `ns` that runs `f`.
pub(crate) fn spawn_in<T: Send + 'static>(
    ns: &str,
    how: Enter,
    name: &str,
    f: impl FnOnce() -> Result<T, LabError> + Send + 'static,
) -> Result<JoinHandle<Result<T, LabError>>, LabError> {
    let ns = ns.to_string();
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            enter(&ns, how)?;
            f()
        })
        .map_err(|e| LabError::Io {
            path: format!("thread {name}"),
            source: e,
        })
}

/// Runs `f` in a thread inside namespace `ns` and waits for it.
pub(crate) fn run_in<T: Send + 'static>(
    ns: &str,
    how: Enter,
    f: impl FnOnce() -> Result<T, LabError> + Send + 'static,
) -> Result<T, LabError> {
    spawn_in(ns, how, "weir-lab-netns", f)?
        .join()
        .map_err(|_| LabError::Config(format!("a thread in namespace {ns} panicked")))?
}
