//! Least privilege for `weir run --user NAME` (or `user = "NAME"`): started as root, the service
//! opens its sockets and stores, then becomes NAME, keeping only the capabilities a job needs to
//! open capture sockets later (a job restarted by a config reload): CAP_NET_RAW, CAP_NET_ADMIN
//! and CAP_IPC_LOCK.
//!
//! [`drop_to`] hands the stores to the user (recursively), sets `PR_SET_KEEPCAPS`, then
//! `initgroups`/`setgid`/`setuid` (glibc applies each to every thread of the process), and last
//! `capset` on the calling thread: permitted = effective = the three kept capabilities. Threads
//! the caller starts afterwards inherit them; the job threads already running keep no
//! capability (their sockets are open).

use std::ffi::CString;
use std::path::{Path, PathBuf};

/// The capabilities kept after the drop, as said in the notice.
pub const KEPT: &str = "CAP_NET_RAW, CAP_NET_ADMIN, CAP_IPC_LOCK";

/// CAP_NET_ADMIN, CAP_NET_RAW, CAP_IPC_LOCK (bits 12, 13, 14 of the first word).
const KEPT_MASK: u32 = (1 << 12) | (1 << 13) | (1 << 14);

/// A user to run as, from /etc/passwd.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunAs {
    /// Its name.
    pub name: String,
    /// Its uid.
    pub uid: u32,
    /// Its primary gid.
    pub gid: u32,
}

/// Why the service could not become its user.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PrivilegeError {
    /// The process is not root.
    #[error(
        "--user {0}: weir must be started as root to switch to another user (it runs as uid {1})"
    )]
    NotRoot(String, u32),
    /// A store could not be handed to the user.
    #[error("cannot give {} to user {user}", path.display())]
    Chown {
        /// The file or directory.
        path: PathBuf,
        /// The user.
        user: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A system call of the switch failed.
    #[error("{call} failed while switching to user {user}")]
    Switch {
        /// The call.
        call: &'static str,
        /// The user.
        user: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// Looks `name` up in /etc/passwd: `Err` says why when there is no such user.
pub fn lookup(name: &str) -> Result<RunAs, String> {
    if name.is_empty() || name.contains(':') || name.chars().any(char::is_control) {
        return Err(format!("`{name}` is not a user name"));
    }
    let text = std::fs::read_to_string("/etc/passwd")
        .map_err(|e| format!("cannot read /etc/passwd: {e}"))?;
    text.lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            (f.len() >= 4 && f[0] == name).then_some(())?;
            Some(RunAs {
                name: name.to_string(),
                uid: f[2].parse().ok()?,
                gid: f[3].parse().ok()?,
            })
        })
        .ok_or_else(|| format!("no user `{name}` on this machine (/etc/passwd)"))
}

/// Fails unless the process runs as root (checked before anything starts).
pub fn check_root(user: &RunAs) -> Result<(), PrivilegeError> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    if euid != 0 {
        return Err(PrivilegeError::NotRoot(user.name.clone(), euid));
    }
    Ok(())
}

/// Gives `path` and everything under it to `user` (symbolic links themselves, not followed).
fn chown_tree(path: &Path, user: &RunAs) -> Result<(), PrivilegeError> {
    let err = |source| PrivilegeError::Chown {
        path: path.to_path_buf(),
        user: user.name.clone(),
        source,
    };
    std::os::unix::fs::lchown(path, Some(user.uid), Some(user.gid)).map_err(err)?;
    let meta = std::fs::symlink_metadata(path).map_err(err)?;
    if meta.is_dir() {
        for e in std::fs::read_dir(path).map_err(err)? {
            chown_tree(&e.map_err(err)?.path(), user)?;
        }
    }
    Ok(())
}

/// The header of capget/capset (`struct __user_cap_header_struct`).
#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

/// One word of capset's data (`struct __user_cap_data_struct`).
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// `_LINUX_CAPABILITY_VERSION_3`: two data words.
const CAP_V3: u32 = 0x2008_0522;

/// Hands `stores` to `user` and makes the process `user`, keeping [`KEPT`] in the calling
/// thread (and the threads it starts later). Must run as root; nothing is undone on failure
/// (the caller stops).
pub fn drop_to(user: &RunAs, stores: &[&Path]) -> Result<(), PrivilegeError> {
    check_root(user)?;
    for s in stores {
        if s.exists() {
            chown_tree(s, user)?;
        }
    }
    let fail = |call: &'static str| PrivilegeError::Switch {
        call,
        user: user.name.clone(),
        source: std::io::Error::last_os_error(),
    };
    let name = CString::new(user.name.as_str()).map_err(|_| PrivilegeError::Switch {
        call: "initgroups",
        user: user.name.clone(),
        source: std::io::ErrorKind::InvalidInput.into(),
    })?;
    // SAFETY: prctl(PR_SET_KEEPCAPS, 1) takes integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_KEEPCAPS, 1 as libc::c_ulong, 0, 0, 0) } != 0 {
        return Err(fail("prctl(PR_SET_KEEPCAPS)"));
    }
    // SAFETY: `name` is a valid NUL-terminated string for the call's duration; glibc applies
    // the groups to every thread.
    if unsafe { libc::initgroups(name.as_ptr(), user.gid) } != 0 {
        return Err(fail("initgroups"));
    }
    // SAFETY: integer argument; glibc applies it to every thread.
    if unsafe { libc::setgid(user.gid) } != 0 {
        return Err(fail("setgid"));
    }
    // SAFETY: integer argument; glibc applies it to every thread (the calling one keeps its
    // permitted capabilities: PR_SET_KEEPCAPS above).
    if unsafe { libc::setuid(user.uid) } != 0 {
        return Err(fail("setuid"));
    }
    let mut header = CapHeader {
        version: CAP_V3,
        pid: 0,
    };
    let data = [
        CapData {
            effective: KEPT_MASK,
            permitted: KEPT_MASK,
            inheritable: 0,
        },
        CapData::default(),
    ];
    // SAFETY: capset reads a v3 header and two data words, both valid for the call.
    if unsafe { libc::syscall(libc::SYS_capset, &mut header, data.as_ptr()) } != 0 {
        return Err(fail("capset"));
    }
    // SAFETY: integer arguments; the kept capabilities stay after this (they are set above).
    unsafe { libc::prctl(libc::PR_SET_KEEPCAPS, 0 as libc::c_ulong, 0, 0, 0) };
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn looks_users_up() {
        let root = lookup("root").unwrap();
        assert_eq!((root.uid, root.gid), (0, 0));
        assert!(lookup("no-such-user-weir")
            .unwrap_err()
            .contains("no user `no-such-user-weir`"));
        assert!(lookup("").is_err());
        assert!(lookup("a:b").is_err());
        assert!(lookup("a\nb").is_err());
    }
}
