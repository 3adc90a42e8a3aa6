//! Keys and certificates generated per control plane.

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, DnValue, IsCa, KeyPair,
    KeyUsagePurpose, PublicKeyData, SigningKey,
};

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
    let bytes: [u8; 24] = random_bytes()?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

fn random_bytes<const N: usize>() -> Result<[u8; N], Error> {
    use std::io::Read;
    let mut bytes = [0u8; N];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(Error::io("read /dev/urandom"))?;
    Ok(bytes)
}

/// A client certificate and its private key, both PEM, as a CSR-approved OCM agent holds them.
#[derive(Clone, Debug)]
pub struct ClientCertificate {
    pub cert_pem: String,
    pub key_pem: String,
}

/// The CA that kube-apiserver trusts for client certificates (`--client-ca-file`).
pub(crate) struct ClientCa {
    key: KeyPair,
    cert_pem: String,
}

/// The client CA's common name. Leaf certificates name it as issuer with the same encoding
/// (UTF8String) as the CA's subject, since verifiers match issuer to subject byte for byte.
const CLIENT_CA_NAME: &str = "testenv-client-ca";

const OID_COMMON_NAME: &[u64] = &[2, 5, 4, 3];
const OID_ORGANIZATION: &[u64] = &[2, 5, 4, 10];
const OID_ECDSA_WITH_SHA256: &[u64] = &[1, 2, 840, 10045, 4, 3, 2];
const OID_KEY_USAGE: &[u64] = &[2, 5, 29, 15];
const OID_BASIC_CONSTRAINTS: &[u64] = &[2, 5, 29, 19];
const OID_EXT_KEY_USAGE: &[u64] = &[2, 5, 29, 37];
const OID_CLIENT_AUTH: &[u64] = &[1, 3, 6, 1, 5, 5, 7, 3, 2];

impl ClientCa {
    pub(crate) fn generate() -> Result<Self, Error> {
        let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?;
        let mut params = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(
            DnType::CommonName,
            DnValue::Utf8String(CLIENT_CA_NAME.into()),
        );
        params.distinguished_name = dn;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let cert_pem = params.self_signed(&key)?.pem();
        Ok(Self { key, cert_pem })
    }

    pub(crate) fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// The CA's private key (PKCS#8 PEM), for a signer that issues client certificates the
    /// apiserver accepts (kube-controller-manager's CSR signer).
    pub(crate) fn key_pem(&self) -> String {
        self.key.serialize_pem()
    }

    /// A client certificate for `user` in `groups`, valid from a minute ago (clock skew) for
    /// `valid_for`.
    ///
    /// Encoded by hand rather than with rcgen: Kubernetes takes one group from each subject `O`
    /// attribute, and rcgen's distinguished name holds at most one attribute per type.
    pub(crate) fn issue(
        &self,
        user: &str,
        groups: &[&str],
        valid_for: Duration,
    ) -> Result<ClientCertificate, Error> {
        let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?;
        let now = SystemTime::now();
        let not_before = now
            .checked_sub(Duration::from_secs(60))
            .ok_or_else(|| Error::Invalid("the clock is before 1970".into()))?;
        let not_after = now
            .checked_add(valid_for)
            .ok_or_else(|| Error::Invalid(format!("certificate lifetime {valid_for:?}")))?;

        let mut serial: [u8; 16] = random_bytes()?;
        // Positive and minimally encoded, as strict DER parsers (Go's) require.
        serial[0] = (serial[0] & 0x7f) | 0x40;
        let signature_algorithm = sequence(&[&oid(OID_ECDSA_WITH_SHA256)]);
        let mut subject: Vec<(&[u64], &str)> =
            groups.iter().map(|g| (OID_ORGANIZATION, *g)).collect();
        subject.push((OID_COMMON_NAME, user));
        let extensions = sequence(&[
            // digitalSignature only: the key is ECDSA.
            &extension(OID_KEY_USAGE, true, &tlv(0x03, &[0x07, 0x80])),
            &extension(OID_BASIC_CONSTRAINTS, true, &sequence(&[])),
            &extension(
                OID_EXT_KEY_USAGE,
                false,
                &sequence(&[&oid(OID_CLIENT_AUTH)]),
            ),
        ]);
        let tbs = sequence(&[
            &tlv(0xa0, &tlv(0x02, &[2])), // version v3
            &tlv(0x02, &serial),
            &signature_algorithm,
            &name(&[(OID_COMMON_NAME, CLIENT_CA_NAME)]),
            &sequence(&[&time(not_before)?, &time(not_after)?]),
            &name(&subject),
            &key.subject_public_key_info(),
            &tlv(0xa3, &extensions),
        ]);
        let signature = self.key.sign(&tbs)?;
        let der = sequence(&[
            &tbs,
            &signature_algorithm,
            &tlv(0x03, &[&[0u8][..], &signature].concat()),
        ]);
        Ok(ClientCertificate {
            cert_pem: pem("CERTIFICATE", &der),
            key_pem: key.serialize_pem(),
        })
    }
}

/// A serving certificate for `127.0.0.1` and `localhost`, signed by a fresh CA: what a webhook
/// on loopback serves, and the CA the apiserver must trust for it (its `caBundle`).
pub(crate) struct ServingCertificate {
    pub(crate) ca_pem: String,
    pub(crate) cert_pem: String,
    pub(crate) key_pem: String,
}

pub(crate) fn serving_certificate() -> Result<ServingCertificate, Error> {
    let ca_key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?;
    let mut ca = CertificateParams::default();
    ca.distinguished_name
        .push(DnType::CommonName, "testenv-serving-ca");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_pem = ca.self_signed(&ca_key)?.pem();
    let issuer = rcgen::Issuer::new(ca, ca_key);
    let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?;
    let mut leaf = CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])?;
    leaf.distinguished_name
        .push(DnType::CommonName, "127.0.0.1");
    leaf.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    let cert_pem = leaf.signed_by(&key, &issuer)?.pem();
    Ok(ServingCertificate {
        ca_pem,
        cert_pem,
        key_pem: key.serialize_pem(),
    })
}

/// A PKCS#10 certificate request (PEM) for `user` in `groups` (one subject `O` per group, as
/// OCM's registration agent asks for add-on certificates), and its private key (PEM).
/// Hand-encoded for the same reason as client certificates: rcgen keeps one `O`.
pub fn certificate_request(user: &str, groups: &[&str]) -> Result<(String, String), Error> {
    let mut subject: Vec<(&[u64], &str)> = groups.iter().map(|g| (OID_ORGANIZATION, *g)).collect();
    subject.push((OID_COMMON_NAME, user));
    let (der, key) = certificate_request_der(&subject, &[])?;
    Ok((pem("CERTIFICATE REQUEST", &der), key))
}

/// A PKCS#10 certificate request (DER), self-signed with a fresh ECDSA P-256 key, and that
/// key (PEM): for tests that build hostile requests. `subject`: one single-valued RDN per
/// `(attribute type arcs, UTF8String value)`, in order; `attributes`: the DER content of the
/// request's `[0]` attributes (empty for none).
pub fn certificate_request_der(
    subject: &[(&[u64], &str)],
    attributes: &[u8],
) -> Result<(Vec<u8>, String), Error> {
    certificate_request_der_with_name(&name(subject), attributes)
}

/// [`certificate_request_der`] with the subject given as the DER of a whole `Name`, however
/// odd: for tests of how a subject is read.
pub fn certificate_request_der_with_name(
    subject: &[u8],
    attributes: &[u8],
) -> Result<(Vec<u8>, String), Error> {
    let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?;
    let info = sequence(&[
        &tlv(0x02, &[0]), // version 1
        subject,
        &key.subject_public_key_info(),
        &tlv(0xa0, attributes),
    ]);
    let signature = key.sign(&info)?;
    let der = sequence(&[
        &info,
        &sequence(&[&oid(OID_ECDSA_WITH_SHA256)]),
        &tlv(0x03, &[&[0u8][..], &signature].concat()),
    ]);
    Ok((der, key.serialize_pem()))
}

/// `der` as a PEM block labelled `label`, 64 base64 characters a line.
pub fn pem_encode(label: &str, der: &[u8]) -> String {
    pem(label, der)
}

/// A DER type-length-value.
fn tlv(tag: u8, content: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    let len = content.len();
    if len < 0x80 {
        out.push(len as u8);
    } else {
        let bytes = len.to_be_bytes();
        let skip = bytes.iter().take_while(|&&b| b == 0).count();
        out.push(0x80 | (bytes.len() - skip) as u8);
        out.extend_from_slice(&bytes[skip..]);
    }
    out.extend_from_slice(content);
    out
}

fn sequence(parts: &[&[u8]]) -> Vec<u8> {
    tlv(0x30, &parts.concat())
}

/// An OBJECT IDENTIFIER; `arcs` has at least two elements (all callers pass constants).
fn oid(arcs: &[u64]) -> Vec<u8> {
    let mut body = Vec::new();
    let (first, rest) = arcs.split_at(2.min(arcs.len()));
    let head = first.first().copied().unwrap_or(0) * 40 + first.get(1).copied().unwrap_or(0);
    for &arc in std::iter::once(&head).chain(rest) {
        let mut chunk = vec![(arc & 0x7f) as u8];
        let mut high = arc >> 7;
        while high > 0 {
            chunk.push(0x80 | (high & 0x7f) as u8);
            high >>= 7;
        }
        body.extend(chunk.iter().rev());
    }
    tlv(0x06, &body)
}

/// A Name with one single-valued RDN per attribute, values as UTF8String.
fn name(attributes: &[(&[u64], &str)]) -> Vec<u8> {
    let rdns: Vec<u8> = attributes
        .iter()
        .flat_map(|(ty, value)| tlv(0x31, &sequence(&[&oid(ty), &tlv(0x0c, value.as_bytes())])))
        .collect();
    tlv(0x30, &rdns)
}

fn extension(id: &[u64], critical: bool, value: &[u8]) -> Vec<u8> {
    let critical: &[u8] = if critical { &[0x01, 0x01, 0xff] } else { &[] };
    sequence(&[&oid(id), critical, &tlv(0x04, value)])
}

/// UTCTime through 2049, GeneralizedTime after, as RFC 5280 prescribes.
fn time(t: SystemTime) -> Result<Vec<u8>, Error> {
    let secs = t
        .duration_since(UNIX_EPOCH)
        .map_err(|_| Error::Invalid("a certificate time before 1970".into()))?
        .as_secs();
    let (year, month, day) = civil_from_days(secs / 86_400);
    let rem = secs % 86_400;
    let clock = format!(
        "{month:02}{day:02}{:02}{:02}{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    );
    match year {
        ..2050 => Ok(tlv(0x17, format!("{:02}{clock}", year % 100).as_bytes())),
        2050..10_000 => Ok(tlv(0x18, format!("{year:04}{clock}").as_bytes())),
        _ => Err(Error::Invalid(format!(
            "certificate validity past year 9999 ({year})"
        ))),
    }
}

/// (year, month, day) of a day count since 1970-01-01 (Howard Hinnant's `civil_from_days`).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

fn pem(label: &str, der: &[u8]) -> String {
    let b64 = base64(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for line in b64.as_bytes().chunks(64) {
        out.push_str(&String::from_utf8_lossy(line));
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

/// Standard base64 with padding (RFC 4648), for PEM and kubeconfig `*-data` fields.
pub(crate) fn base64(data: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[(n >> (18 - 6 * i) & 0x3f) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_rfc4648_vectors() {
        for (input, want) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(input.as_bytes()), want);
        }
    }

    #[test]
    fn civil_dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        assert_eq!(civil_from_days(19_723), (2024, 1, 1));
        assert_eq!(civil_from_days(2_932_896), (9999, 12, 31));
    }

    #[test]
    fn der_encodings() {
        assert_eq!(oid(OID_CLIENT_AUTH), [6, 8, 43, 6, 1, 5, 5, 7, 3, 2]);
        assert_eq!(
            oid(OID_ECDSA_WITH_SHA256),
            [6, 8, 0x2a, 0x86, 0x48, 0xce, 0x3d, 4, 3, 2]
        );
        assert_eq!(tlv(4, &[0; 200])[..3], [4, 0x81, 200]);
        assert_eq!(tlv(4, &[0; 300])[..4], [4, 0x82, 1, 44]);
        let t = UNIX_EPOCH + Duration::from_secs(951_782_400 + 3_723);
        assert_eq!(time(t).ok(), Some(tlv(0x17, b"000229010203Z")));
        let t = UNIX_EPOCH + Duration::from_secs(2_524_608_000);
        assert_eq!(time(t).ok(), Some(tlv(0x18, b"20500101000000Z")));
    }
}
