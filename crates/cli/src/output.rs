//! Where command output goes (a file or stdout) and how run-time outcomes become exit statuses.
//!
//! Every byte a command prints goes through [`Output`]: stdout ([`stdout`]) or a file
//! ([`create`]). Its errors name the output ("cannot write to stdout: …", "cannot write PATH: …")
//! and keep their kind, so a reader that went away ([`is_broken_pipe`]) ends the command quietly
//! with status 0 and any other write error (a full disk, `> /dev/full`) is reported with status 1.
//! Nothing panics on a closed stdout: `println!` is denied in the whole binary (main.rs).
//!
//! A regular-file output is written to a temporary name in the same directory and renamed over
//! the path only by [`Output::commit`]; an output dropped without it (the command failed) is
//! removed, so a failed command leaves an existing file as it was. [`check_inputs`] opens every
//! input before an output is created and refuses an output that is one of the inputs.

use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

use anyhow::{bail, Context, Result};

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

/// A checked output: stdout or a file. Write errors carry the output's name and the OS error's
/// kind. A file output must be [`commit`](Output::commit)ted, or it is removed when dropped.
pub(crate) struct Output {
    target: Target,
    /// How errors name the output: `to stdout`, or the path.
    name: String,
}

enum Target {
    Stdout(io::Stdout),
    File {
        file: File,
        /// The temporary file and the path it is renamed to by `commit`; `None` when the output
        /// is written in place (a device, a FIFO).
        rename: Option<(PathBuf, PathBuf)>,
    },
}

/// The process's stdout, checked: errors say "cannot write to stdout" and keep their kind.
pub(crate) fn stdout() -> Output {
    Output {
        target: Target::Stdout(io::stdout()),
        name: "to stdout".into(),
    }
}

/// Opens `path` for writing, `-` meaning stdout. A regular file (or a new one) is written under
/// a temporary name in its directory and takes its place at [`Output::commit`]; through a
/// symbolic link, the link's target is replaced. Devices and FIFOs are written in place.
pub(crate) fn create(path: &Path) -> Result<Output> {
    if path.as_os_str() == "-" {
        return Ok(stdout());
    }
    let name = path.display().to_string();
    let special = std::fs::metadata(path).is_ok_and(|m| !m.is_file());
    if special {
        let file = File::options()
            .write(true)
            .open(path)
            .with_context(|| format!("cannot open {name}"))?;
        return Ok(Output {
            target: Target::File { file, rename: None },
            name,
        });
    }
    // Replace what a symbolic link points to, not the link.
    let dest = match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => {
            std::fs::canonicalize(path).with_context(|| format!("cannot resolve {name}"))?
        }
        _ => path.to_path_buf(),
    };
    let file_name = dest
        .file_name()
        .with_context(|| format!("cannot create {name}: not a file name"))?;
    let mut tmp_name = file_name.to_os_string();
    tmp_name.push(format!(".weir-tmp-{}", std::process::id()));
    let tmp = dest.with_file_name(tmp_name);
    let file = File::options()
        .write(true)
        .create_new(true)
        .open(&tmp)
        .with_context(|| format!("cannot create {name}"))?;
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

/// Whether two output paths (`-` is stdout) would write to the same place, so that two logs
/// would interleave: the same name, the same file (through links, or `/dev/stdout` and `-`),
/// the same terminal or pipe. `/dev/null` is never the same place: what goes there twice is
/// discarded twice and nothing mixes.
pub(crate) fn same_output(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
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

/// Opens `path` for writing in place, `-` meaning stdout: for a live capture, whose file must
/// hold every packet written so far if the process is killed (as `tcpdump -w` does), so it is
/// not written under a temporary name.
pub(crate) fn create_in_place(path: &Path) -> Result<Output> {
    if path.as_os_str() == "-" {
        return Ok(stdout());
    }
    let name = path.display().to_string();
    let file = File::create(path).with_context(|| format!("cannot create {name}"))?;
    Ok(Output {
        target: Target::File { file, rename: None },
        name,
    })
}

impl Output {
    fn named(&self, e: io::Error) -> io::Error {
        io::Error::new(e.kind(), format!("cannot write {}: {e}", self.name))
    }

    /// Flushes the output and, for a file written under a temporary name, renames it over its
    /// path: the command's output is complete.
    pub(crate) fn commit(mut self) -> Result<()> {
        self.flush()?;
        if let Target::File {
            rename: rename @ Some(_),
            ..
        } = &mut self.target
        {
            let (tmp, dest) = rename.take().expect("matched Some");
            if let Err(e) = std::fs::rename(&tmp, &dest) {
                let _ = std::fs::remove_file(&tmp);
                return Err(e).with_context(|| format!("cannot write {}", dest.display()));
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
        }
    }
}

/// True when stdout is a pipe or socket whose reader went away. A writer that has nothing to
/// write (a live capture while no traffic arrives) asks this to end as soon as its reader does,
/// instead of at its next write.
pub(crate) fn stdout_gone() -> bool {
    let mut fd = libc::pollfd {
        fd: libc::STDOUT_FILENO,
        events: 0,
        revents: 0,
    };
    // SAFETY: one valid pollfd, count 1, no wait; poll only writes `revents`.
    let n = unsafe { libc::poll(&mut fd, 1, 0) };
    n == 1 && fd.revents & (libc::POLLERR | libc::POLLHUP) != 0
}

/// Checks the inputs of a command before its output is created: each one (but `-`, stdin) must
/// open for reading, and `output` must not be one of them (the same file by device and inode,
/// also through a symbolic or hard link). Directories (stores) are checked for existence only.
pub(crate) fn check_inputs<P: AsRef<Path>>(inputs: &[P], output: Option<&Path>) -> Result<()> {
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
        let f = File::open(input).with_context(|| format!("cannot open {}", input.display()))?;
        let m = f
            .metadata()
            .with_context(|| format!("cannot open {}", input.display()))?;
        if out_id == Some((m.dev(), m.ino())) {
            bail!(
                "refusing to write {} over the input {}",
                output.expect("an id comes from an output").display(),
                input.display()
            );
        }
    }
    Ok(())
}

/// True when the error chain ends in a broken pipe (the reader of our stdout went away).
pub(crate) fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|e| {
        e.downcast_ref::<io::Error>()
            .is_some_and(|e| e.kind() == io::ErrorKind::BrokenPipe)
            || e.downcast_ref::<weir_pcap::WriteError>().is_some_and(
                |e| matches!(e, weir_pcap::WriteError::Io(io) if io.kind() == io::ErrorKind::BrokenPipe),
            )
            || e.downcast_ref::<serde_json::Error>()
                .is_some_and(|e| e.io_error_kind() == Some(io::ErrorKind::BrokenPipe))
    })
}

/// The error's message with its causes, `: `-separated, without repeating a cause whose text
/// the message already ends with (error types that print their source and also return it from
/// `source()` would otherwise show an OS error twice).
pub(crate) fn error_message(err: &anyhow::Error) -> String {
    let mut msg = String::new();
    for cause in err.chain() {
        let text = cause.to_string();
        if msg.is_empty() {
            msg = text;
        } else if !msg.ends_with(&text) {
            msg.push_str(": ");
            msg.push_str(&text);
        }
    }
    msg
}

/// Prints a warning about a damaged input; the command goes on with its next input.
pub(crate) fn warn_damage(err: &weir_pcap::ReadError) {
    eprintln!("weir: warning: {err}");
}

/// Tells the user what reading a store came across (`weir: ...`, `weir: warning: ...`; notices
/// meant for a verbose run only when `verbose`); damage sets `status` to [`Status::Damaged`].
pub(crate) fn notice(n: &weir_store::Notice, verbose: bool, status: &mut Status) {
    if n.is_damage() {
        *status = Status::Damaged;
    }
    if n.is_verbose() && !verbose {
        return;
    }
    if n.is_warning() {
        eprintln!("weir: warning: {n}");
    } else {
        eprintln!("weir: {n}");
    }
}

/// Installs the SIGINT/SIGTERM handler that sets `flag` (the live commands and `gen` end on it).
pub(crate) fn on_signal(flag: std::sync::Arc<std::sync::atomic::AtomicBool>) -> Result<()> {
    ctrlc::set_handler(move || flag.store(true, std::sync::atomic::Ordering::Relaxed))
        .context("cannot install the SIGINT/SIGTERM handler")
}

/// Human bytes: `1.5 GiB`.
pub(crate) fn human_bytes(b: u64) -> String {
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

/// Prints what a job tells (`weir: TEXT`, `weir: warning: TEXT`); progress is the command's
/// to show (`weir record`'s status line).
pub(crate) fn event(e: weir_sensor::Event) {
    match e {
        weir_sensor::Event::Notice(t) => eprintln!("weir: {t}"),
        weir_sensor::Event::Warning(t) => eprintln!("weir: warning: {t}"),
        weir_sensor::Event::Progress(_) => {}
    }
}

/// Installs the SIGHUP handler and returns the flag it sets (a job's
/// [`Controls::reload`](weir_sensor::Controls)).
pub(crate) fn on_hangup() -> Result<&'static AtomicBool> {
    // SAFETY: the handler only stores to an atomic (async-signal-safe); `signal` installs it
    // for SIGHUP with glibc's BSD semantics (SA_RESTART: no EINTR elsewhere).
    let old = unsafe {
        libc::signal(
            libc::SIGHUP,
            on_hangup_signal as extern "C" fn(libc::c_int) as libc::sighandler_t,
        )
    };
    if old == libc::SIG_ERR {
        bail!(
            "cannot install the SIGHUP handler: {}",
            io::Error::last_os_error()
        );
    }
    Ok(&HANGUP)
}

/// Set by SIGHUP, cleared by the job that reloads its rules.
static HANGUP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_hangup_signal(_: libc::c_int) {
    HANGUP.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// The job controls of a live command: SIGINT/SIGTERM stop it; with `rules`, SIGHUP reloads
/// them (without, SIGHUP keeps its default).
pub(crate) fn controls(rules: bool) -> Result<weir_sensor::Controls> {
    let mut controls = weir_sensor::Controls::default();
    on_signal(controls.stop.clone())?;
    if rules {
        controls.reload = on_hangup()?;
    }
    Ok(controls)
}

/// The closing lines every live command prints ([`weir_sensor::live::live_summary`]).
pub(crate) use weir_sensor::live::live_summary;
