//! Where a command's output goes: stdout or a file, checked, and a file complete or absent.
//!
//! Every byte a command prints goes through [`Output`]: stdout ([`stdout`]) or a file
//! ([`create`]). Its errors name the output ("cannot write to stdout: …", "cannot write PATH: …")
//! and keep their kind, so a caller can tell a reader that went away (a broken pipe) from a full
//! disk. A regular-file output is written to a temporary name in the same directory and renamed
//! over the path only by [`Output::commit`]; an output dropped without it (the run failed or was
//! stopped) is removed, so a failed run leaves an existing file as it was and a killed one
//! leaves no half file under the final name. [`check_inputs`] opens every input before an
//! output is created and refuses an output that is one of the inputs.
//!
//! A signal skips the drop: the temporary names still open are kept in a registry that the
//! binary's SIGINT/SIGTERM handler empties with [`remove_temps`] before it exits. A temporary
//! file left by a writer killed outright (SIGKILL, a crash) is named `OUT.weir-tmp-PID`: the next
//! [`create`] of `OUT` removes those whose process is gone, so they neither pile up nor stop a
//! later run that happens to get the same pid.

use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

/// The temporary files of the outputs open in this process (see the module documentation).
static TEMPS: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// The suffix of a temporary output's name, before the writer's pid.
const TEMP_SUFFIX: &str = ".weir-tmp-";

fn temps() -> std::sync::MutexGuard<'static, Vec<PathBuf>> {
    TEMPS.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Forgets `tmp` (renamed over its output, or removed).
fn unregister(tmp: &Path) {
    let mut t = temps();
    if let Some(i) = t.iter().position(|p| p == tmp) {
        t.swap_remove(i);
    }
}

/// Removes the temporary files of every output still open in this process (a half-written
/// output), for a signal handler about to end the process: the outputs' final names keep what
/// they held before the run. Returns how many were removed.
pub fn remove_temps() -> usize {
    let mut t = temps();
    let n = t.iter().filter(|p| std::fs::remove_file(p).is_ok()).count();
    t.clear();
    n
}

/// Removes `DEST.weir-tmp-PID` files beside `dest` whose process no longer runs (left by a
/// writer that was killed outright). Nothing is removed when `/proc` cannot tell.
fn remove_stale_temps(dest: &Path) {
    let (Some(dir), Some(name)) = (dest.parent(), dest.file_name()) else {
        return;
    };
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    if !Path::new("/proc/self").exists() {
        return;
    }
    let mut prefix = name.to_os_string();
    prefix.push(TEMP_SUFFIX);
    let prefix = prefix.as_encoded_bytes();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let file = e.file_name();
        let Some(pid) = file.as_encoded_bytes().strip_prefix(prefix) else {
            continue;
        };
        let Some(pid) = std::str::from_utf8(pid)
            .ok()
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        let mine = pid == std::process::id() && temps().iter().any(|t| t == &e.path());
        let running = pid != std::process::id() && Path::new(&format!("/proc/{pid}")).exists();
        if !mine && !running {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// A checked output: stdout or a file (see the module documentation). A file output must be
/// [`commit`](Output::commit)ted, or it is removed when dropped.
pub struct Output {
    target: Target,
    /// How errors name the output: `to stdout`, or the path.
    name: String,
}

enum Target {
    Stdout(io::Stdout),
    File {
        file: File,
        /// The temporary file and the path it is renamed to by `commit`; `None` when the output
        /// is written in place (a device, a FIFO, a live capture).
        rename: Option<(PathBuf, PathBuf)>,
    },
}

/// A write to an [`Output`] that failed: `cannot write OUTPUT: CAUSE`, where OUTPUT is `to
/// stdout` or the path. It travels inside the [`io::Error`] the write returns (same kind), so
/// that however a caller wraps that error, [`write_failure`] finds it and every command says a
/// failed write the same way.
#[derive(Debug)]
pub struct WriteFailure {
    output: String,
    cause: io::Error,
}

impl WriteFailure {
    /// `cause`, of the output named `output`, as an [`io::Error`] of the same kind.
    fn wrap(output: String, cause: io::Error) -> io::Error {
        io::Error::new(cause.kind(), WriteFailure { output, cause })
    }
}

impl std::fmt::Display for WriteFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "cannot write {}: {}", self.output, self.cause)
    }
}

impl std::error::Error for WriteFailure {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.cause)
    }
}

/// The failed output write in `err`'s chain, if any: what a command reports for it, whatever
/// context it came through ("export to json -", a writer's "write failed"), since it names the
/// output and the cause (`cannot write to stdout: No space left on device (os error 28)`).
pub fn write_failure<'a>(err: &'a (dyn std::error::Error + 'static)) -> Option<&'a WriteFailure> {
    let mut next = Some(err);
    while let Some(e) = next {
        let found = e
            .downcast_ref::<io::Error>()
            .and_then(io::Error::get_ref)
            .and_then(|inner| inner.downcast_ref::<WriteFailure>());
        if found.is_some() {
            return found;
        }
        next = e.source();
    }
    None
}

/// An output that could not be opened, or an input that could not (`cannot create PATH`,
/// `cannot open PATH`, `refusing to write OUT over the input IN`), with the OS error as source.
#[derive(Debug)]
pub struct OpenError {
    /// What could not be done.
    pub what: String,
    /// The OS error, if any.
    pub source: Option<io::Error>,
}

impl std::fmt::Display for OpenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.what)
    }
}

impl std::error::Error for OpenError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source.as_ref().map(|e| e as _)
    }
}

/// `what` failed with `e`.
fn ctx(e: io::Error, what: String) -> OpenError {
    OpenError {
        what,
        source: Some(e),
    }
}

/// The process's stdout, checked: errors say "cannot write to stdout" and keep their kind.
pub fn stdout() -> Output {
    Output {
        target: Target::Stdout(io::stdout()),
        name: "to stdout".into(),
    }
}

/// Opens `path` for writing, `-` meaning stdout. A regular file (or a new one) is written under
/// a temporary name in its directory and takes its place at [`Output::commit`]; through a
/// symbolic link, the link's target is replaced. Devices and FIFOs are written in place.
pub fn create(path: &Path) -> Result<Output, OpenError> {
    if path.as_os_str() == "-" {
        return Ok(stdout());
    }
    let name = path.display().to_string();
    if std::fs::metadata(path).is_ok_and(|m| !m.is_file()) {
        let file = File::options()
            .write(true)
            .open(path)
            .map_err(|e| ctx(e, format!("cannot write {name}")))?;
        return Ok(Output {
            target: Target::File { file, rename: None },
            name,
        });
    }
    // Replace what a symbolic link points to, not the link.
    let dest = match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => {
            std::fs::canonicalize(path).map_err(|e| ctx(e, format!("cannot resolve {name}")))?
        }
        _ => path.to_path_buf(),
    };
    let Some(file_name) = dest.file_name() else {
        return Err(OpenError {
            what: format!("cannot create {name}: not a file name"),
            source: None,
        });
    };
    let mut tmp_name = file_name.to_os_string();
    tmp_name.push(format!("{TEMP_SUFFIX}{}", std::process::id()));
    let tmp = dest.with_file_name(tmp_name);
    remove_stale_temps(&dest);
    // registered before it exists: a signal between the two leaves nothing behind
    temps().push(tmp.clone());
    let file = File::options()
        .write(true)
        .create_new(true)
        .open(&tmp)
        .map_err(|e| {
            unregister(&tmp);
            ctx(e, format!("cannot create {name}"))
        })?;
    // An existing file keeps its permissions.
    if let Ok(m) = std::fs::metadata(&dest) {
        let _ = file.set_permissions(m.permissions());
    }
    Ok(Output {
        target: Target::File {
            file,
            rename: Some((tmp, dest)),
        },
        name,
    })
}

/// Opens `path` for writing in place, `-` meaning stdout: for a live capture, whose file must
/// hold every packet written so far if the process is killed (as `tcpdump -w` does), so it is
/// not written under a temporary name.
pub fn create_in_place(path: &Path) -> Result<Output, OpenError> {
    if path.as_os_str() == "-" {
        return Ok(stdout());
    }
    let name = path.display().to_string();
    let file = File::create(path).map_err(|e| ctx(e, format!("cannot create {name}")))?;
    Ok(Output {
        target: Target::File { file, rename: None },
        name,
    })
}

impl Output {
    fn named(&self, e: io::Error) -> io::Error {
        WriteFailure::wrap(self.name.clone(), e)
    }

    /// Whether this is the process's stdout.
    pub fn is_stdout(&self) -> bool {
        matches!(self.target, Target::Stdout(_))
    }

    /// Flushes the output and, for a file written under a temporary name, renames it over its
    /// path: the output is complete.
    pub fn commit(mut self) -> io::Result<()> {
        self.commit_mut()
    }

    /// [`commit`](Output::commit) through a reference (for an output kept in a boxed writer);
    /// writes after it go nowhere under the final name.
    pub fn commit_mut(&mut self) -> io::Result<()> {
        self.flush()?;
        if let Target::File {
            rename: rename @ Some(_),
            ..
        } = &mut self.target
        {
            let (tmp, dest) = rename.take().expect("matched Some");
            let renamed = std::fs::rename(&tmp, &dest);
            unregister(&tmp);
            if let Err(e) = renamed {
                let _ = std::fs::remove_file(&tmp);
                return Err(WriteFailure::wrap(dest.display().to_string(), e));
            }
        }
        Ok(())
    }
}

impl Write for Output {
    #[inline]
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let r = match &mut self.target {
            Target::Stdout(s) => s.write(buf),
            Target::File { file, .. } => file.write(buf),
        };
        r.map_err(|e| self.named(e))
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        let r = match &mut self.target {
            Target::Stdout(s) => s.write_all(buf),
            Target::File { file, .. } => file.write_all(buf),
        };
        r.map_err(|e| self.named(e))
    }

    fn flush(&mut self) -> io::Result<()> {
        let r = match &mut self.target {
            Target::Stdout(s) => s.flush(),
            Target::File { file, .. } => file.flush(),
        };
        r.map_err(|e| self.named(e))
    }
}

impl Drop for Output {
    fn drop(&mut self) {
        if let Target::File {
            rename: Some((tmp, _)),
            ..
        } = &self.target
        {
            let _ = std::fs::remove_file(tmp);
            unregister(tmp);
        }
    }
}

/// Creates the output directory `dir` and its parents. An existing file (or device) there is
/// refused as `not a directory`, where `create_dir_all` would say "File exists".
pub fn create_dir(dir: &Path) -> io::Result<()> {
    if std::fs::metadata(dir).is_ok_and(|m| !m.is_dir()) {
        return Err(io::Error::new(
            io::ErrorKind::NotADirectory,
            "not a directory",
        ));
    }
    std::fs::create_dir_all(dir)
}

/// Checks the inputs of a command before its output is created: each one (but `-`, stdin) must
/// open for reading, and `output` must not be one of them (the same file by device and inode,
/// also through a symbolic or hard link). Directories (stores) are checked for existence only.
pub fn check_inputs<P: AsRef<Path>>(inputs: &[P], output: Option<&Path>) -> Result<(), OpenError> {
    let out_id = output
        .filter(|o| o.as_os_str() != "-")
        .and_then(|o| std::fs::metadata(o).ok())
        .filter(|m| m.is_file())
        .map(|m| (m.dev(), m.ino()));
    for input in inputs {
        let input = input.as_ref();
        if input.as_os_str() == "-" {
            continue;
        }
        let open = |e| ctx(e, format!("cannot open {}", input.display()));
        let m = File::open(input).and_then(|f| f.metadata()).map_err(open)?;
        if let (Some(id), Some(out)) = (out_id, output) {
            if id == (m.dev(), m.ino()) {
                return Err(OpenError {
                    what: format!(
                        "refusing to write {} over the input {}",
                        out.display(),
                        input.display()
                    ),
                    source: None,
                });
            }
        }
    }
    Ok(())
}

/// Human bytes: `1.5 GiB`.
pub fn human_bytes(b: u64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < units.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", units[u])
    }
}

/// An error's message with its causes, `: `-separated, without repeating a cause whose text the
/// message already ends with (error types that print their source and also return it from
/// `source()` would otherwise show an OS error twice).
pub fn error_chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut msg = err.to_string();
    let mut cause = err.source();
    while let Some(c) = cause {
        let text = c.to_string();
        if !msg.ends_with(&text) {
            msg.push_str(": ");
            msg.push_str(&text);
        }
        cause = c.source();
    }
    msg
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The registry is the process's: tests that open outputs take turns.
    static SERIAL: Mutex<()> = Mutex::new(());

    fn scratch(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("weir-output-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    /// A context wrapping an error, as the exporters and the pcap writer do.
    #[derive(Debug)]
    struct Context(&'static str, io::Error);

    impl std::fmt::Display for Context {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.0)
        }
    }

    impl std::error::Error for Context {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.1)
        }
    }

    /// A write to /dev/full fails with ENOSPC naming the output and keeping the kind; under
    /// a context, [`write_failure`] still finds it, and its chain says it once.
    #[test]
    fn a_failed_write_names_its_output_under_any_context() {
        let mut o = create(Path::new("/dev/full")).unwrap();
        let e = o
            .write_all(&[0u8; 10])
            .and_then(|()| o.flush())
            .unwrap_err();
        assert_eq!(e.raw_os_error(), None);
        assert_eq!(e.kind(), io::ErrorKind::StorageFull);
        let wrapped = Context("export to json /dev/full: write failed", e);
        let failure = write_failure(&wrapped).expect("found under the context");
        assert_eq!(
            error_chain(failure),
            "cannot write /dev/full: No space left on device (os error 28)"
        );
        let plain = Context("other", io::Error::other("x"));
        assert!(write_failure(&plain).is_none());
    }

    /// What a signal handler does: the open output's temporary file goes, the old file stays.
    #[test]
    fn remove_temps_leaves_the_old_output() {
        let _serial = SERIAL.lock().unwrap_or_else(PoisonError::into_inner);
        let d = scratch("signal");
        let out = d.join("o.txt");
        std::fs::write(&out, "old").unwrap();
        let mut o = create(&out).unwrap();
        o.write_all(b"half").unwrap();
        assert_eq!(names(&d).len(), 2, "the temporary file is there");
        assert!(remove_temps() >= 1);
        assert_eq!(names(&d), ["o.txt"]);
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "old");
        drop(o);
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// A dead writer's temporary file (pid of a child that ended; pid 1 always runs) is
    /// removed by the next create of the same output, a running one's kept, others' untouched.
    #[test]
    fn stale_temps_of_dead_writers_are_removed() {
        let _serial = SERIAL.lock().unwrap_or_else(PoisonError::into_inner);
        let d = scratch("stale");
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let stale = format!("o.txt{TEMP_SUFFIX}{dead}");
        let running = format!("o.txt{TEMP_SUFFIX}1");
        let other = format!("p.txt{TEMP_SUFFIX}{dead}");
        let not_a_pid = format!("o.txt{TEMP_SUFFIX}x");
        for n in [&stale, &running, &other, &not_a_pid] {
            std::fs::write(d.join(n), "x").unwrap();
        }
        let mut o = create(&d.join("o.txt")).unwrap();
        o.write_all(b"new").unwrap();
        o.commit().unwrap();
        let mut want = vec!["o.txt".to_owned(), running, other, not_a_pid];
        want.sort();
        assert_eq!(names(&d), want);
        assert_eq!(std::fs::read_to_string(d.join("o.txt")).unwrap(), "new");
        std::fs::remove_dir_all(&d).unwrap();
    }
}
