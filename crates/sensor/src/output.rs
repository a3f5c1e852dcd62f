//! Where a command's outputs go: whether two output paths name the same place ([`same_output`],
//! so that two logs would interleave) and whether the reader of stdout went away
//! ([`stdout_gone`], for a live job that has nothing to write while it waits for traffic), and
//! whether an error is that reader going away ([`is_broken_pipe`]: not an error, a quiet end).

use std::os::fd::AsFd;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use rustix::event::{poll, PollFd, PollFlags, Timespec};

/// Whether two output paths (`-` is stdout) would write to the same place, so that two logs
/// would interleave: the same name, the same file (through links, or `/dev/stdout` and `-`),
/// the same terminal or pipe. `/dev/null` is never the same place: what goes there twice is
/// discarded twice and nothing mixes.
pub fn same_output(a: &Path, b: &Path) -> bool {
    let meta = |p: &Path| {
        let p = if p.as_os_str() == "-" {
            Path::new("/dev/stdout")
        } else {
            p
        };
        std::fs::metadata(p).ok()
    };
    let (ma, mb) = (meta(a), meta(b));
    let null = std::fs::metadata("/dev/null").ok();
    let is_null = |m: &Option<std::fs::Metadata>| {
        m.as_ref()
            .zip(null.as_ref())
            .is_some_and(|(m, n)| m.file_type().is_char_device() && m.rdev() == n.rdev())
    };
    if is_null(&ma) || is_null(&mb) {
        return false;
    }
    if a == b {
        return true;
    }
    match (ma, mb) {
        (Some(x), Some(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
        // not created yet: the same name in the same (resolved) directory
        _ => {
            let resolved = |p: &Path| {
                let dir = match p.parent() {
                    Some(d) if !d.as_os_str().is_empty() => d,
                    _ => Path::new("."),
                };
                Some((std::fs::canonicalize(dir).ok()?, p.file_name()?.to_owned()))
            };
            resolved(a).is_some_and(|x| resolved(b) == Some(x))
        }
    }
}

/// Refuses, among a command's outputs (`(flag, path)`, `None` for an output not asked for), one
/// that is one of `inputs` (the files it reads: [`weir_packet::output::check_inputs`]), one that
/// is a directory, and two in one place ([`same_output`]): `FLAG and FLAG both name PATH: give
/// each its own output`.
pub fn distinct_outputs(outs: &[(&str, Option<&Path>)], inputs: &[PathBuf]) -> Result<(), String> {
    let outs: Vec<(&str, &Path)> = outs
        .iter()
        .filter_map(|&(f, p)| p.map(|p| (f, p)))
        .collect();
    for (i, (fa, a)) in outs.iter().enumerate() {
        weir_packet::output::check_inputs(inputs, Some(*a)).map_err(|e| format!("{fa}: {e}"))?;
        if a.is_dir() {
            return Err(format!("{fa}: {} is a directory", a.display()));
        }
        if let Some((fb, _)) = outs[i + 1..].iter().find(|(_, b)| same_output(a, b)) {
            return Err(format!(
                "{fa} and {fb} both name {}: give each its own output",
                a.display()
            ));
        }
    }
    Ok(())
}

/// Refuses a second log of an analyzer (`flag`, at `other`) in the same place as its main log
/// (`main`): `FLAG and -w both name PATH: ADVICE`.
pub fn other_log(
    main: &Path,
    other: Option<&Path>,
    flag: &str,
    advice: &str,
) -> Result<(), String> {
    match other {
        Some(o) if same_output(o, main) => {
            Err(format!("{flag} and -w both name {}: {advice}", o.display()))
        }
        _ => Ok(()),
    }
}

/// True when stdout is a pipe or socket whose reader went away. A writer that has nothing to
/// write (a live capture while no traffic arrives) asks this to end as soon as its reader does,
/// instead of at its next write.
pub fn stdout_gone() -> bool {
    reader_gone(&std::io::stdout())
}

/// True when `fd` is a pipe or socket whose other end was closed (poll says POLLHUP or
/// POLLERR, without waiting).
pub fn reader_gone(fd: &impl AsFd) -> bool {
    let mut fds = [PollFd::new(fd, PollFlags::empty())];
    let now = Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    matches!(poll(&mut fds, Some(&now)), Ok(1))
        && fds[0].revents().intersects(PollFlags::ERR | PollFlags::HUP)
}

/// True when an error in `chain` (an error and its sources) is a broken pipe: the reader of
/// our stdout went away.
pub fn is_broken_pipe<'a>(
    mut chain: impl Iterator<Item = &'a (dyn std::error::Error + 'static)>,
) -> bool {
    use std::io;
    let pipe = |k: Option<io::ErrorKind>| k == Some(io::ErrorKind::BrokenPipe);
    chain.any(|e| {
        e.downcast_ref::<crate::SensorError>()
            .is_some_and(crate::SensorError::is_broken_pipe)
            || pipe(e.downcast_ref::<io::Error>().map(io::Error::kind))
            || matches!(e.downcast_ref::<weir_pcap::WriteError>(),
                Some(weir_pcap::WriteError::Io(io)) if io.kind() == io::ErrorKind::BrokenPipe)
            || pipe(
                e.downcast_ref::<serde_json::Error>()
                    .and_then(serde_json::Error::io_error_kind),
            )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_output_sees_names_links_and_dev_null() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a.json");
        let b = dir.path().join("b.json");
        // not created yet: by name in the resolved directory
        assert!(same_output(&a, &a));
        assert!(!same_output(&a, &b));
        let dotted = dir.path().join(".").join("a.json");
        assert!(same_output(&a, &dotted));
        // created: by device and inode, through a hard link
        std::fs::write(&a, b"x").unwrap();
        let link = dir.path().join("link.json");
        std::fs::hard_link(&a, &link).unwrap();
        assert!(same_output(&a, &link));
        std::fs::write(&b, b"y").unwrap();
        assert!(!same_output(&a, &b));
        // /dev/null twice mixes nothing
        assert!(!same_output(Path::new("/dev/null"), Path::new("/dev/null")));
        // `-` is stdout under any name of it
        assert!(same_output(Path::new("-"), Path::new("-")));
    }

    #[test]
    fn a_closed_peer_is_seen_without_a_write() {
        let (ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
        assert!(!reader_gone(&ours));
        drop(theirs);
        assert!(reader_gone(&ours));
        let file = tempfile::tempfile().unwrap();
        assert!(!reader_gone(&file));
    }
}
