//! Server TLS: a certificate chain and key from PEM files, read again when the files change,
//! or a self-signed certificate made in memory at start (as the generic apiserver does when it
//! has no certificate, which it writes to `--cert-dir`; ours is never written).

use std::net::SocketAddr;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;
use rustls::crypto::CryptoProvider;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use thiserror::Error;

/// How long a self-signed certificate is valid (the generic apiserver's is a year too).
const SELF_SIGNED_DAYS: i32 = 365;

#[derive(Debug, Error)]
pub enum TlsError {
    #[error("reading the TLS certificate {path}: {message}")]
    Certificate { path: String, message: String },
    #[error("reading the TLS key {path}: {message}")]
    Key { path: String, message: String },
    #[error("the TLS key {key} does not belong to the certificate {cert}: {source}")]
    Pair {
        cert: String,
        key: String,
        #[source]
        source: rustls::Error,
    },
    #[error("the TLS certificate and key do not make a server configuration: {0}")]
    Config(#[from] rustls::Error),
    #[error("making a self-signed certificate: {0}")]
    SelfSigned(#[from] rcgen::Error),
}

/// A rustls server configuration (HTTP/1.1) serving the certificate chain in `cert` with the
/// key in `key`. Both are read now (an error if they are unusable), and read again on the
/// first handshake after either file changed, so that a renewed certificate (a Secret volume
/// swapping its files, cert-manager) reaches new connections without a restart. A new pair
/// that cannot be used (unparsable, or key and certificate not matching, as while one file is
/// written before the other) is logged, and the previous certificate stays in use.
pub fn server_config(cert: &Path, key: &Path) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let provider = provider();
    let files = CertFiles {
        cert: cert.to_path_buf(),
        key: key.to_path_buf(),
        provider: provider.clone(),
    };
    let stamp = files.stamp();
    let current = Arc::new(files.read()?);
    let resolver = ReloadingCert {
        files,
        state: Mutex::new(Loaded { stamp, current }),
    };
    config(provider, Arc::new(resolver))
}

/// A self-signed certificate made at start, and the configuration that serves it.
pub struct SelfSigned {
    pub config: Arc<rustls::ServerConfig>,
    /// The certificate (DER), for clients to pin.
    pub certificate: CertificateDer<'static>,
    /// Its SHA-256 [`fingerprint`], for the log.
    pub fingerprint: String,
}

/// A new key and a self-signed certificate for `names` (DNS names and IP addresses; the first
/// is also the common name), valid from yesterday for a year. The key never leaves memory.
pub fn self_signed(names: &[String]) -> Result<SelfSigned, TlsError> {
    let key = rcgen::KeyPair::generate()?;
    let mut params = rcgen::CertificateParams::new(names.to_vec())?;
    if let Some(first) = names.first() {
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, first.as_str());
    }
    // Yesterday: a client whose clock is a little behind still accepts it.
    let today = jiff::Timestamp::now()
        .to_zoned(jiff::tz::TimeZone::UTC)
        .date();
    let from = today.yesterday().unwrap_or(today);
    let until = from
        .checked_add(jiff::Span::new().days(SELF_SIGNED_DAYS))
        .unwrap_or(today);
    let ymd = |d: jiff::civil::Date| {
        let part = |n: i8| u8::try_from(n).unwrap_or(1);
        rcgen::date_time_ymd(i32::from(d.year()), part(d.month()), part(d.day()))
    };
    params.not_before = ymd(from);
    params.not_after = ymd(until);
    let cert = params.self_signed(&key)?;
    let certificate = cert.der().clone();
    let provider = provider();
    let certified = CertifiedKey::from_der(
        vec![certificate.clone()],
        PrivateKeyDer::Pkcs8(key.serialize_der().into()),
        &provider,
    )?;
    let config = config(provider, Arc::new(Fixed(Arc::new(certified))))?;
    Ok(SelfSigned {
        fingerprint: fingerprint(&certificate),
        certificate,
        config,
    })
}

/// The names a self-signed certificate for a server listening on `bind` is made for: the
/// host name, `localhost`, the loopback addresses, and the bind address unless it is
/// "any" (`0.0.0.0`, `::`).
pub fn self_signed_names(bind: SocketAddr) -> Vec<String> {
    let mut names = Vec::new();
    if let Some(host) = hostname::get().ok().and_then(|h| h.into_string().ok())
        && !host.is_empty()
    {
        names.push(host);
    }
    names.extend(["localhost", "127.0.0.1", "::1"].map(String::from));
    let ip = bind.ip();
    if !ip.is_unspecified() && !ip.is_loopback() {
        names.push(ip.to_string());
    }
    names
}

/// The SHA-256 fingerprint of a DER certificate as `openssl x509 -fingerprint -sha256`
/// prints it: upper-case hex pairs joined by `:`.
pub fn fingerprint(der: &[u8]) -> String {
    ring::digest::digest(&ring::digest::SHA256, der)
        .as_ref()
        .iter()
        .map(|b| format!("{b:02X}"))
        .collect::<Vec<_>>()
        .join(":")
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn config(
    provider: Arc<CryptoProvider>,
    resolver: Arc<dyn ResolvesServerCert>,
) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_cert_resolver(resolver);
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// One certificate for every handshake.
#[derive(Debug)]
struct Fixed(Arc<CertifiedKey>);

impl ResolvesServerCert for Fixed {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.clone())
    }
}

/// The certificate and key files and how to read them.
#[derive(Debug)]
struct CertFiles {
    cert: PathBuf,
    key: PathBuf,
    provider: Arc<CryptoProvider>,
}

/// What identifies one version of a file: a replaced file (a Secret volume's symlink swap, a
/// rename) has another inode; a file rewritten in place another size or change time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileStamp {
    dev: u64,
    ino: u64,
    len: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

/// Both files' stamps; `None` for a file that cannot be looked at (missing for a moment).
type Stamp = (Option<FileStamp>, Option<FileStamp>);

impl CertFiles {
    fn stamp(&self) -> Stamp {
        let of = |path: &Path| {
            std::fs::metadata(path).ok().map(|m| FileStamp {
                dev: m.dev(),
                ino: m.ino(),
                len: m.len(),
                mtime: (m.mtime(), m.mtime_nsec()),
                ctime: (m.ctime(), m.ctime_nsec()),
            })
        };
        (of(&self.cert), of(&self.key))
    }

    fn read(&self) -> Result<CertifiedKey, TlsError> {
        let cert_path = self.cert.display().to_string();
        let key_path = self.key.display().to_string();
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&self.cert)
            .and_then(|it| it.collect())
            .map_err(|e| TlsError::Certificate {
                path: cert_path.clone(),
                message: e.to_string(),
            })?;
        if certs.is_empty() {
            return Err(TlsError::Certificate {
                path: cert_path,
                message: "no certificate in the file".into(),
            });
        }
        let key = PrivateKeyDer::from_pem_file(&self.key).map_err(|e| TlsError::Key {
            path: key_path.clone(),
            message: e.to_string(),
        })?;
        // Checks that the key is the certificate's (rustls compares the public keys).
        CertifiedKey::from_der(certs, key, &self.provider).map_err(|source| TlsError::Pair {
            cert: cert_path,
            key: key_path,
            source,
        })
    }
}

/// The certificate in use and the file versions it was last read from.
#[derive(Debug)]
struct Loaded {
    /// The stamps of the last read, whether it succeeded or not: a broken pair is tried (and
    /// logged) once, not on every handshake.
    stamp: Stamp,
    current: Arc<CertifiedKey>,
}

/// Serves the files' certificate, read again when their stamps change. The check is two
/// `stat`s per handshake, cheap next to the handshake itself; reading happens only on change.
#[derive(Debug)]
struct ReloadingCert {
    files: CertFiles,
    state: Mutex<Loaded>,
}

impl ResolvesServerCert for ReloadingCert {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let mut state = self.state.lock();
        let stamp = self.files.stamp();
        if stamp != state.stamp {
            state.stamp = stamp;
            match self.files.read() {
                Ok(next) => {
                    let fingerprint = next
                        .end_entity_cert()
                        .map(|c| fingerprint(c))
                        .unwrap_or_default();
                    tracing::info!(
                        cert = %self.files.cert.display(),
                        %fingerprint,
                        "serving certificate reloaded"
                    );
                    state.current = Arc::new(next);
                }
                Err(e) => tracing::error!(
                    error = %e,
                    "the serving certificate files changed but cannot be used; keeping the previous certificate"
                ),
            }
        }
        Some(state.current.clone())
    }
}
