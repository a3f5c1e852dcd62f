//! The one small HTTP/1.1 server of weir (and the client's wire pieces), on plain std sockets
//! and threads, with no async runtime. It serves Prometheus' `/metrics` (weir-metrics), the
//! web page of `weir run` (weir-sensor) and `weir serve`'s store extracts (weir-store).
//!
//! - [`server`]: bind, an accept thread, request heads read with a size limit and a timeout
//!   and parsed with httparse, a [`Handler`] closure answering with a whole or a streamed
//!   (chunked) body, 405 for methods the caller does not take, optional TLS, stop on drop.
//! - [`tls`]: rustls server and client configurations from PEM files, client certificates
//!   required when a client CA is given.
//! - [`wire`]: percent-encoded queries, chunked bodies, the client's head reader.
//! - [`client`]: a connection to a server, plain or TLS.

#![forbid(unsafe_code)]

pub mod client;
pub mod server;
pub mod tls;
pub mod wire;

pub use rustls;
pub use server::{
    answer, read_head, Body, Handler, Head, Methods, Options, Request, Response, Server, StartError,
};
pub use tls::TlsError;
