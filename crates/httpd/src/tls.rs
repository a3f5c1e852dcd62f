//! TLS for the server and the client (rustls with the *ring* provider, PEM files read with
//! rustls-pemfile): [`server_config`] requires a client certificate signed by a CA when given
//! one; [`client_config`] trusts one CA and may present a certificate. Every file is read and
//! checked here, so a missing, unreadable or garbage file is an error before anything listens
//! or connects.

use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{ClientConfig, RootCertStore, ServerConfig};

/// Why a TLS configuration could not be made.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// The file cannot be read.
    #[error("cannot read the {what} {path}")]
    Read {
        /// What the file should hold.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The system's error.
        #[source]
        source: std::io::Error,
    },
    /// The file holds no usable PEM item of the kind wanted.
    #[error("{path}: not a {what} (no PEM {kind} in it{why})")]
    Pem {
        /// What the file should hold.
        what: &'static str,
        /// The PEM item looked for.
        kind: &'static str,
        /// The file.
        path: PathBuf,
        /// More detail, when any (starts with `: `).
        why: String,
    },
    /// rustls refused the configuration (a key that does not match its certificate, a CA
    /// that is not one...).
    #[error("{what}: {source}")]
    Rustls {
        /// What was being configured.
        what: String,
        /// rustls's reason.
        #[source]
        source: rustls::Error,
    },
    /// The client-certificate verifier could not be built from the CA file.
    #[error("client CA {path}: {why}")]
    Verifier {
        /// The CA file.
        path: PathBuf,
        /// Why.
        why: String,
    },
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn read(what: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        what,
        path: path.to_owned(),
        source,
    })
}

/// The certificates of a PEM file (at least one).
pub fn certificates(
    what: &'static str,
    path: &Path,
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let bytes = read(what, path)?;
    let pem = |why: String| TlsError::Pem {
        what,
        kind: "CERTIFICATE",
        path: path.to_owned(),
        why,
    };
    let certs: Vec<_> = rustls_pemfile::certs(&mut BufReader::new(&bytes[..]))
        .collect::<Result<_, _>>()
        .map_err(|e| pem(format!(": {e}")))?;
    if certs.is_empty() {
        return Err(pem(String::new()));
    }
    Ok(certs)
}

/// The private key of a PEM file (PKCS#8, PKCS#1 or SEC1).
pub fn private_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let bytes = read("private key", path)?;
    let pem = |why: String| TlsError::Pem {
        what: "private key",
        kind: "PRIVATE KEY",
        path: path.to_owned(),
        why,
    };
    rustls_pemfile::private_key(&mut BufReader::new(&bytes[..]))
        .map_err(|e| pem(format!(": {e}")))?
        .ok_or_else(|| pem(String::new()))
}

fn roots(what: &'static str, path: &Path) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    for c in certificates(what, path)? {
        roots.add(c).map_err(|source| TlsError::Rustls {
            what: format!("{what} {}", path.display()),
            source,
        })?;
    }
    Ok(roots)
}

/// A server configuration: its certificate chain and key, and, with `client_ca`, a client
/// certificate signed by that CA required of every client.
pub fn server_config(
    cert: &Path,
    key: &Path,
    client_ca: Option<&Path>,
) -> Result<Arc<ServerConfig>, TlsError> {
    let chain = certificates("certificate", cert)?;
    let key_der = private_key(key)?;
    let builder = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|source| TlsError::Rustls {
            what: "TLS versions".into(),
            source,
        })?;
    let builder = match client_ca {
        Some(ca) => {
            let roots = Arc::new(roots("client CA certificate", ca)?);
            let verifier =
                rustls::server::WebPkiClientVerifier::builder_with_provider(roots, provider())
                    .build()
                    .map_err(|e| TlsError::Verifier {
                        path: ca.to_owned(),
                        why: e.to_string(),
                    })?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let config = builder
        .with_single_cert(chain, key_der)
        .map_err(|source| TlsError::Rustls {
            what: format!("certificate {} with key {}", cert.display(), key.display()),
            source,
        })?;
    Ok(Arc::new(config))
}

/// A client configuration trusting the CA of `ca` only, presenting `identity` (certificate
/// chain file, key file) when given.
pub fn client_config(
    ca: &Path,
    identity: Option<(&Path, &Path)>,
) -> Result<Arc<ClientConfig>, TlsError> {
    let roots = roots("CA certificate", ca)?;
    let builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|source| TlsError::Rustls {
            what: "TLS versions".into(),
            source,
        })?
        .with_root_certificates(roots);
    let config = match identity {
        Some((cert, key)) => {
            let chain = certificates("certificate", cert)?;
            let key_der = private_key(key)?;
            builder
                .with_client_auth_cert(chain, key_der)
                .map_err(|source| TlsError::Rustls {
                    what: format!("certificate {} with key {}", cert.display(), key.display()),
                    source,
                })?
        }
        None => builder.with_no_client_auth(),
    };
    Ok(Arc::new(config))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_and_garbage_files_are_clear_errors() {
        let dir = std::env::temp_dir().join(format!("weir-httpd-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let garbage = dir.join("garbage.pem");
        std::fs::write(&garbage, b"not a certificate\n\x00\xff").unwrap();
        let half = dir.join("half.pem");
        std::fs::write(&half, b"-----BEGIN CERTIFICATE-----\nMIIB\n").unwrap();
        let missing = dir.join("missing.pem");
        let e = server_config(&missing, &missing, None).unwrap_err();
        assert!(matches!(e, TlsError::Read { .. }), "{e}");
        assert!(e.to_string().contains("missing.pem"), "{e}");
        let e = server_config(&garbage, &garbage, None).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "{}: not a certificate (no PEM CERTIFICATE in it)",
                garbage.display()
            )
        );
        let e = client_config(&half, None).unwrap_err();
        assert!(
            e.to_string().contains("half.pem: not a CA certificate"),
            "{e}"
        );
        let e = private_key(&garbage).unwrap_err();
        assert!(e.to_string().contains("no PEM PRIVATE KEY"), "{e}");
        let e = client_config(&dir, None).unwrap_err();
        assert!(matches!(e, TlsError::Read { .. }), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
