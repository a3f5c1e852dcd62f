//! weir-control: the process's local control interface. A Unix socket speaking JSON lines: a
//! client writes one request object per line, `{"cmd": "rules.add", "rule": "..."}`, and
//! reads one reply object per line, `{"ok": true, ...}` or `{"ok": false, "error": "..."}`.
//!
//! Commands are named `area.verb` and registered in a [`Commands`] table, so the sensor service
//! adds its own (`status`, `config.reload`...) next to the rule commands of [`rules`]:
//!
//! ```no_run
//! use weir_control::{Commands, Server};
//! # fn engine() -> weir_rules::Engine { unimplemented!() }
//! let mut commands = Commands::new();
//! weir_control::rules::register(&mut commands, engine(), Some("rules.txt".into()));
//! commands.add("status", |_req| Ok(serde_json::json!({"uptime_s": 1}).as_object().unwrap().clone()));
//! let server = Server::serve("/run/weir/control.sock", commands).unwrap();
//! // ... the socket answers until `server` is dropped
//! ```
//!
//! One thread serves the socket, one connection at a time (a client that stops talking is cut
//! off after [`IDLE`]). The socket is created with mode 0660 (owner and group); a socket left
//! by a dead process is replaced, one a live process answers on is refused
//! ([`ControlError::InUse`]); it is removed when the [`Server`] is dropped. A request line is
//! at most [`MAX_REQUEST`] bytes; a malformed request gets an error reply, never a panic.

#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod client;
pub mod ctl;
pub mod rules;
pub mod top;

use std::collections::BTreeMap;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use serde_json::{Map, Value};

/// Longest request line, in bytes (a rule line with a long BPF expression fits many times).
pub const MAX_REQUEST: usize = 64 * 1024;

/// How long a connection may stay silent before the server closes it.
pub const IDLE: Duration = Duration::from_secs(10);

/// Errors of the control socket.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// A system call on the socket failed.
    #[error("{path}: {source}")]
    Io {
        /// The socket path.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
    /// Another process answers on the socket.
    #[error("{0}: a running process already listens on this control socket")]
    InUse(PathBuf),
    /// The path exists and is not a socket (it is left alone).
    #[error("{0}: exists and is not a socket")]
    NotSocket(PathBuf),
    /// Nothing listens on the socket (client side): the path is missing, is not a socket, or
    /// is a socket nobody listens on (left by a process that was killed).
    #[error("{path}: {}", not_listening(path, source))]
    NotListening {
        /// The socket path.
        path: PathBuf,
        /// Why the connection failed.
        source: io::Error,
    },
    /// The reply was not a JSON object (client side).
    #[error("{0}: bad reply from the control socket: {1}")]
    BadReply(PathBuf, String),
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> ControlError + '_ {
    move |source| ControlError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// A command's handler: takes the request object, returns the fields of the reply (the server
/// adds `"ok": true`) or an error message (sent as `{"ok": false, "error": ...}`).
pub type Handler = Box<dyn FnMut(&Map<String, Value>) -> Result<Map<String, Value>, String> + Send>;

/// The table of commands a [`Server`] answers, by name.
#[derive(Default)]
pub struct Commands {
    map: BTreeMap<String, Handler>,
}

impl Commands {
    /// An empty table (the server always answers `help` with the command names).
    pub fn new() -> Commands {
        Commands::default()
    }

    /// Adds (or replaces) the command `name`.
    pub fn add(
        &mut self,
        name: &str,
        handler: impl FnMut(&Map<String, Value>) -> Result<Map<String, Value>, String> + Send + 'static,
    ) -> &mut Commands {
        self.map.insert(name.to_string(), Box::new(handler));
        self
    }

    /// The command names, sorted.
    pub fn names(&self) -> Vec<String> {
        self.map.keys().cloned().collect()
    }

    /// Answers one request line (without its newline): the reply object.
    pub fn answer(&mut self, line: &[u8]) -> Value {
        let fail = |e: String| serde_json::json!({"ok": false, "error": e});
        let req: Value = match serde_json::from_slice(line) {
            Ok(v) => v,
            Err(e) => return fail(format!("the request is not JSON: {e}")),
        };
        let Some(req) = req.as_object() else {
            return fail("the request must be a JSON object with a \"cmd\"".into());
        };
        let Some(cmd) = req.get("cmd").and_then(Value::as_str) else {
            return fail("the request has no \"cmd\" string".into());
        };
        if cmd == "help" {
            return serde_json::json!({"ok": true, "commands": self.names()});
        }
        let names = self.names();
        let Some(h) = self.map.get_mut(cmd) else {
            return fail(format!(
                "unknown command `{cmd}` (commands: help, {})",
                names.join(", ")
            ));
        };
        match h(req) {
            Ok(mut m) => {
                m.insert("ok".into(), Value::Bool(true));
                Value::Object(m)
            }
            Err(e) => fail(e),
        }
    }
}

/// A running control socket; dropping it stops the thread and removes the socket.
pub struct Server {
    path: PathBuf,
    /// (device, inode) of the socket file we made: removed on drop only if still ours.
    ident: (u64, u64),
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Server {
    /// Serves the rule commands of [`rules`] for `engine` on the socket `path` (`rules.reload`
    /// re-reads `rules_file`).
    pub fn start(
        path: impl AsRef<Path>,
        engine: weir_rules::Engine,
        rules_file: Option<PathBuf>,
    ) -> Result<Server, ControlError> {
        let mut c = Commands::new();
        rules::register(&mut c, engine, rules_file);
        Server::serve(path, c)
    }

    /// Serves `commands` on the socket `path`, from a new thread.
    pub fn serve(path: impl AsRef<Path>, commands: Commands) -> Result<Server, ControlError> {
        let path = path.as_ref().to_path_buf();
        match std::fs::symlink_metadata(&path) {
            Ok(m) if !m.file_type().is_socket() => return Err(ControlError::NotSocket(path)),
            Ok(_) => match UnixStream::connect(&path) {
                Ok(_) => return Err(ControlError::InUse(path)),
                // stale: its process is gone
                Err(_) => std::fs::remove_file(&path).map_err(io_err(&path))?,
            },
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_err(&path)(e)),
        }
        let listener = UnixListener::bind(&path).map_err(io_err(&path))?;
        let set_up = || -> io::Result<(u64, u64)> {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o660))?;
            let m = std::fs::symlink_metadata(&path)?;
            Ok((m.dev(), m.ino()))
        };
        let ident = match set_up() {
            Ok(i) => i,
            Err(e) => {
                let _ = std::fs::remove_file(&path);
                return Err(io_err(&path)(e));
            }
        };
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let stop = Arc::clone(&stop);
            std::thread::Builder::new()
                .name("weir-control".into())
                .spawn(move || serve_loop(&listener, commands, &stop))
                .map_err(io_err(&path))?
        };
        Ok(Server {
            path,
            ident,
            stop,
            thread: Some(thread),
        })
    }

    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // wake the blocking accept; if the socket is gone, leave the thread to the process
        let woke = UnixStream::connect(&self.path).is_ok();
        if let Some(t) = self.thread.take() {
            if woke {
                let _ = t.join();
            }
        }
        if let Ok(m) = std::fs::symlink_metadata(&self.path) {
            if (m.dev(), m.ino()) == self.ident {
                let _ = std::fs::remove_file(&self.path);
            }
        }
    }
}

fn serve_loop(listener: &UnixListener, mut commands: Commands, stop: &AtomicBool) {
    for conn in listener.incoming() {
        if stop.load(Ordering::SeqCst) {
            return;
        }
        if let Ok(c) = conn {
            // a broken client costs its connection, nothing more
            let _ = serve_conn(c, &mut commands, stop);
        }
    }
}

fn serve_conn(c: UnixStream, commands: &mut Commands, stop: &AtomicBool) -> io::Result<()> {
    c.set_read_timeout(Some(IDLE))?;
    c.set_write_timeout(Some(IDLE))?;
    let mut out = c.try_clone()?;
    let mut r = BufReader::new(c);
    let mut line = Vec::new();
    loop {
        line.clear();
        let n = (&mut r)
            .take(MAX_REQUEST as u64 + 1)
            .read_until(b'\n', &mut line)?;
        if n == 0 || stop.load(Ordering::SeqCst) {
            return Ok(());
        }
        let too_long = line.len() > MAX_REQUEST;
        if line.last() == Some(&b'\n') {
            line.pop();
        }
        let reply = if too_long {
            serde_json::json!({"ok": false, "error": format!("request longer than {MAX_REQUEST} bytes")})
        } else if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        } else {
            commands.answer(&line)
        };
        let mut text = reply.to_string();
        text.push('\n');
        out.write_all(text.as_bytes())?;
        if too_long {
            return Ok(()); // the rest of the line is not worth reading
        }
    }
}

/// Why connecting to `path` failed, in words that point at the cause.
fn not_listening(path: &Path, e: &io::Error) -> String {
    use std::os::unix::fs::FileTypeExt;
    match std::fs::metadata(path) {
        Err(m) if m.kind() == io::ErrorKind::NotFound => {
            "no such control socket (is weir running with --control at this path?)".into()
        }
        Ok(m) if m.is_dir() => "a directory, not a control socket".into(),
        Ok(m) if !m.file_type().is_socket() => {
            "not a control socket (a file of another kind; give weir's --control path)".into()
        }
        Ok(_) if e.kind() == io::ErrorKind::ConnectionRefused => {
            "no weir process listens on this control socket (a stale socket left by a process \
             that ended without removing it?)"
                .into()
        }
        _ => format!("cannot connect to the control socket ({e})"),
    }
}

/// Client side: sends `request` to the socket `path` and returns the reply object (`ok` false
/// replies are returned too: look at `"ok"`).
pub fn request(
    path: impl AsRef<Path>,
    request: &Value,
) -> Result<Map<String, Value>, ControlError> {
    let path = path.as_ref();
    let c = UnixStream::connect(path).map_err(|source| ControlError::NotListening {
        path: path.to_path_buf(),
        source,
    })?;
    c.set_read_timeout(Some(Duration::from_secs(60)))
        .map_err(io_err(path))?;
    let mut w = c.try_clone().map_err(io_err(path))?;
    let mut text = request.to_string();
    text.push('\n');
    w.write_all(text.as_bytes()).map_err(io_err(path))?;
    let mut line = String::new();
    BufReader::new(c)
        .read_line(&mut line)
        .map_err(io_err(path))?;
    match serde_json::from_str::<Value>(&line) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err(ControlError::BadReply(
            path.to_path_buf(),
            "not an object".into(),
        )),
        Err(e) => Err(ControlError::BadReply(path.to_path_buf(), e.to_string())),
    }
}
