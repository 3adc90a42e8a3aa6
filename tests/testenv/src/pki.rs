//! Keys generated per control plane.

use std::path::Path;

use crate::Error;

/// Writes a fresh ECDSA P-256 key pair for signing service-account tokens: the private key
/// (PKCS#8 PEM) to `private` and its public half (SPKI PEM) to `public`.
pub(crate) fn write_service_account_keys(private: &Path, public: &Path) -> Result<(), Error> {
    let key = rcgen::KeyPair::generate()?;
    std::fs::write(private, key.serialize_pem())
        .map_err(Error::io(format!("write {}", private.display())))?;
    std::fs::write(public, key.public_key_pem())
        .map_err(Error::io(format!("write {}", public.display())))
}

/// A random token (hex) for the static token file.
pub(crate) fn random_token() -> Result<String, Error> {
    use std::io::Read;
    let mut bytes = [0u8; 24];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(Error::io("read /dev/urandom"))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}
