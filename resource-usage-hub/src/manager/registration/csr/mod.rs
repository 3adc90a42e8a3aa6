//! What an add-on agent's CertificateSigningRequest asks for, read so that the manager sees
//! exactly the request kube-apiserver and the signer see.
//!
//! They read `spec.request` with Go's `encoding/pem.Decode`, which skips a block it does not
//! like (an END label that differs from the BEGIN one, junk on either line, bad base64) and
//! takes the next one. A lenient reader that stops at the first `-----END` line sees the first
//! block instead, so a request could show us the agent's subject and the signer another
//! identity. Here `spec.request` is accepted only in a form on which every reader agrees:
//! exactly one `CERTIFICATE REQUEST` block, nothing but whitespace around it, no headers, only
//! base64 in its body, a DER request that is consumed entirely and whose self-signature
//! verifies, a subject of common name and organizations only, no attributes or extensions but
//! DNS subject alternative names (upstream's agent asks for `<addon>.addon.open-cluster-management.io`;
//! which names are allowed is the approver's call, see [`Subject::dns_names`]).
//! `tests/csr-vectors/` holds what Go reads from such inputs; the tests below hold us to it.
//!
//! The subject is read by our own walk over its DER ([`strict_subject`]), which takes only the
//! encoding on which Go's `crypto/x509` and we cannot differ: Go's `encoding/asn1` skips an
//! attribute value that is not a primitive universal string (it leaves it nil, and the
//! certificate then lacks it) and ignores elements after the value in an attribute's
//! SEQUENCE, where a lenient reader may take a context-tagged or constructed value for a
//! string. Anything but a primitive UTF8String or PrintableString, exactly two elements per
//! attribute, non-empty RDN sets and minimal definite lengths is refused.

use std::collections::{BTreeSet, HashMap};

use jiff::Timestamp;

use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::ObjectReference;
use ocm_runtime::events::{EventType, Occurrence};
use thiserror::Error;
use x509_parser::certification_request::X509CertificationRequest;
use x509_parser::oid_registry::{OID_X509_COMMON_NAME, OID_X509_ORGANIZATION_NAME};
use x509_parser::prelude::FromDer;

use super::CsrRefusal;

#[cfg(test)]
mod tests;

/// The group every klusterlet registration agent is in on the hub (OCM `ManagedClustersGroup`).
pub const MANAGED_CLUSTERS_GROUP: &str = "system:open-cluster-management:managed-clusters";

/// Usages an add-on client certificate may ask for: client auth (required), and the two key
/// usages upstream's registration agent adds.
pub const CLIENT_AUTH: &str = "client auth";
const ALLOWED_USAGES: [&str; 3] = [CLIENT_AUTH, "digital signature", "key encipherment"];

/// `spec.expirationSeconds` bounds: Kubernetes' minimum, and the kube-apiserver-client
/// signer's default `--cluster-signing-duration` (one year), which caps what it issues anyway.
pub const MIN_EXPIRATION_SECONDS: i32 = 600;
pub const MAX_EXPIRATION_SECONDS: i32 = 365 * 24 * 3600;

/// Why `spec.request` is not an acceptable certificate request.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum RequestError {
    #[error("spec.request is not exactly one PEM CERTIFICATE REQUEST block: {0}")]
    Framing(&'static str),
    #[error("the PEM body is not canonical padded base64")]
    Base64,
    #[error("the PEM body is not a PKCS#10 request: {0}")]
    Der(String),
    #[error("{0} bytes follow the DER request")]
    TrailingBytes(usize),
    #[error("the request's self-signature does not verify: {0}")]
    Signature(String),
    #[error("the subject has a {0} attribute; only CN and O are asked for")]
    SubjectAttribute(String),
    #[error("a subject value is not a UTF8String or PrintableString")]
    StringType,
    #[error("the subject has {0} common names, not one")]
    CommonNames(usize),
    #[error(
        "the request carries attributes or extensions other than DNS subject alternative names; the agent asks for none"
    )]
    Attributes,
    #[error("the subject is not in the one encoding every reader reads alike: {0}")]
    Ambiguous(&'static str),
}

/// The subject of an accepted request: what the certificate will say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subject {
    pub common_name: String,
    pub organizations: Vec<String>,
    /// The DNS names of the subjectAltName extension, if the request has one (no other kind
    /// of name is accepted). Not part of the identity kube-apiserver takes from a client
    /// certificate, but the approver allows only what the agent needs.
    pub dns_names: Vec<String>,
}

const BEGIN: &[u8] = b"-----BEGIN CERTIFICATE REQUEST-----";
const END: &[u8] = b"-----END CERTIFICATE REQUEST-----";

fn whitespace(b: &u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r' | b'\n')
}

fn base64_char(b: &u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'=')
}

/// A line end (`\n` or `\r\n`) at the start of `s`, and what follows it.
fn line_end(s: &[u8]) -> Option<&[u8]> {
    s.strip_prefix(b"\n").or_else(|| s.strip_prefix(b"\r\n"))
}

/// The DER bytes of `pem` when it is exactly one strict `CERTIFICATE REQUEST` block.
///
/// Stricter than Go on every point, so that Go reads the same block from whatever passes:
/// leading whitespace must end a line (Go finds BEGIN only at a line start), the BEGIN and END
/// lines are exact, body lines are non-empty base64 (no headers, spaces or blank lines), and
/// after the END line's line end only whitespace may follow.
pub fn pem_der(pem: &[u8]) -> Result<Vec<u8>, RequestError> {
    use RequestError::Framing;
    let start = pem
        .iter()
        .position(|b| !whitespace(b))
        .ok_or(Framing("it is empty"))?;
    if start > 0 && pem[start - 1] != b'\n' {
        return Err(Framing("the BEGIN line does not start a line"));
    }
    let mut rest = pem[start..]
        .strip_prefix(BEGIN)
        .and_then(line_end)
        .ok_or(Framing(
            "it does not start with exactly a BEGIN CERTIFICATE REQUEST line",
        ))?;
    let mut body = Vec::with_capacity(rest.len());
    loop {
        if let Some(after) = rest.strip_prefix(END) {
            let tail = if after.is_empty() {
                after
            } else {
                line_end(after).ok_or(Framing("the END line has more on it"))?
            };
            if !tail.iter().all(whitespace) {
                return Err(Framing("something follows the END line"));
            }
            break;
        }
        let nl = rest
            .iter()
            .position(|&b| b == b'\n')
            .ok_or(Framing("there is no END CERTIFICATE REQUEST line"))?;
        let line = &rest[..nl];
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() || !line.iter().all(base64_char) {
            return Err(Framing(
                "a body line is not base64 (a header, a blank line, spaces or another block)",
            ));
        }
        body.extend_from_slice(line);
        rest = &rest[nl + 1..];
    }
    if body.is_empty() {
        return Err(Framing("the block is empty"));
    }
    // Padding only at the very end: Go and data-encoding agree on nothing else.
    let data = body.iter().position(|&b| b == b'=').unwrap_or(body.len());
    if body[data..].iter().any(|&b| b != b'=') {
        return Err(RequestError::Base64);
    }
    data_encoding::BASE64
        .decode(&body)
        .map_err(|_| RequestError::Base64)
}

/// The subject of `pem` when it is an acceptable add-on certificate request (see the module
/// documentation).
pub fn parse_request(pem: &[u8]) -> Result<Subject, RequestError> {
    let der = pem_der(pem)?;
    let (rest, req) =
        X509CertificationRequest::from_der(&der).map_err(|e| RequestError::Der(e.to_string()))?;
    if !rest.is_empty() {
        return Err(RequestError::TrailingBytes(rest.len()));
    }
    req.verify_signature()
        .map_err(|e| RequestError::Signature(e.to_string()))?;
    let info = &req.certification_request_info;
    let mut dns_names = Vec::new();
    for attribute in info.attributes() {
        dns_names.extend(only_dns_names(attribute).ok_or(RequestError::Attributes)?);
    }
    let (cns, organizations) = strict_subject(info.subject.as_raw())?;
    // The DER parser's reading must be the same (it is, for what the walk accepts; a guard
    // against either one changing).
    let mut theirs = (Vec::new(), Vec::new());
    for attr in info.subject.iter_attributes() {
        let value = std::str::from_utf8(attr.as_slice()).map_err(|_| RequestError::StringType)?;
        if *attr.attr_type() == OID_X509_COMMON_NAME {
            theirs.0.push(value.to_owned());
        } else if *attr.attr_type() == OID_X509_ORGANIZATION_NAME {
            theirs.1.push(value.to_owned());
        }
    }
    if theirs != (cns.clone(), organizations.clone()) {
        return Err(RequestError::Ambiguous(
            "two parsers read the subject differently",
        ));
    }
    match <[String; 1]>::try_from(cns) {
        Ok([common_name]) => Ok(Subject {
            common_name,
            organizations,
            dns_names,
        }),
        Err(cns) => Err(RequestError::CommonNames(cns.len())),
    }
}

/// One DER element: its identifier octet, its content, and what follows it. Only the forms
/// DER allows: a low tag number, a definite length in the fewest octets.
fn der_element(input: &[u8]) -> Result<(u8, &[u8], &[u8]), RequestError> {
    use RequestError::Ambiguous;
    let (&tag, rest) = input
        .split_first()
        .ok_or(Ambiguous("an element is cut short"))?;
    if tag & 0x1f == 0x1f {
        return Err(Ambiguous("a high tag number"));
    }
    let (&first, rest) = rest
        .split_first()
        .ok_or(Ambiguous("an element is cut short"))?;
    let (len, rest) = match first {
        0..=0x7f => (usize::from(first), rest),
        0x81 | 0x82 => {
            let n = usize::from(first & 0x7f);
            if rest.len() < n || rest[0] == 0 {
                return Err(Ambiguous("a length that is not minimal"));
            }
            let len = rest[..n]
                .iter()
                .fold(0usize, |acc, &b| (acc << 8) | usize::from(b));
            if len < 0x80 || (n == 2 && len < 0x100) {
                return Err(Ambiguous("a length that is not minimal"));
            }
            (len, &rest[n..])
        }
        _ => return Err(Ambiguous("an indefinite or oversized length")),
    };
    if rest.len() < len {
        return Err(Ambiguous("an element is cut short"));
    }
    Ok((tag, &rest[..len], &rest[len..]))
}

/// DER of the OIDs 2.5.4.3 (commonName) and 2.5.4.10 (organizationName).
const CN_OID: &[u8] = &[0x55, 0x04, 0x03];
const O_OID: &[u8] = &[0x55, 0x04, 0x0a];
/// Universal, primitive UTF8String and PrintableString.
const UTF8_STRING: u8 = 0x0c;
const PRINTABLE_STRING: u8 = 0x13;

/// The common names and organizations of a DER `Name`, in order, when it is a SEQUENCE of
/// non-empty SETs of SEQUENCEs of exactly an OID and a primitive UTF8String or
/// PrintableString, nothing after any of them; other attribute types are refused.
pub fn strict_subject(name: &[u8]) -> Result<(Vec<String>, Vec<String>), RequestError> {
    use RequestError::Ambiguous;
    let (tag, mut rdns, rest) = der_element(name)?;
    if tag != 0x30 || !rest.is_empty() {
        return Err(Ambiguous("the subject is not one SEQUENCE"));
    }
    let (mut cns, mut organizations) = (Vec::new(), Vec::new());
    while !rdns.is_empty() {
        let (tag, mut set, rest) = der_element(rdns)?;
        rdns = rest;
        if tag != 0x31 || set.is_empty() {
            return Err(Ambiguous("an RDN is not a non-empty SET"));
        }
        while !set.is_empty() {
            let (tag, atv, rest) = der_element(set)?;
            set = rest;
            if tag != 0x30 {
                return Err(Ambiguous("an attribute is not a SEQUENCE"));
            }
            let (tag, oid, atv) = der_element(atv)?;
            if tag != 0x06 {
                return Err(Ambiguous("an attribute type is not an OID"));
            }
            let (tag, value, atv) = der_element(atv)?;
            if !atv.is_empty() {
                return Err(Ambiguous("an attribute has more than a type and a value"));
            }
            let value = match tag {
                UTF8_STRING => std::str::from_utf8(value).map_err(|_| RequestError::StringType)?,
                PRINTABLE_STRING if value.iter().all(printable) => {
                    std::str::from_utf8(value).map_err(|_| RequestError::StringType)?
                }
                _ => return Err(RequestError::StringType),
            };
            match oid {
                CN_OID => cns.push(value.to_owned()),
                O_OID => organizations.push(value.to_owned()),
                _ => {
                    let id = x509_parser::der_parser::oid::Oid::new(oid.into());
                    return Err(RequestError::SubjectAttribute(id.to_id_string()));
                }
            }
        }
    }
    Ok((cns, organizations))
}

/// PrintableString's alphabet (X.680), as Go checks it (Go also lets `*` and `&` through;
/// neither is in a name we approve).
fn printable(b: &u8) -> bool {
    b.is_ascii_alphanumeric() || b" '()+,-./:=?".contains(b)
}

/// The DNS names of an attribute upstream's registration agent puts in every add-on request:
/// an extension request whose only extension is a non-critical subjectAltName of DNS names
/// (`<addon>.addon.open-cluster-management.io`); `None` for any other attribute.
fn only_dns_names(
    attribute: &x509_parser::cri_attributes::X509CriAttribute<'_>,
) -> Option<Vec<String>> {
    use x509_parser::cri_attributes::ParsedCriAttribute;
    use x509_parser::extensions::{GeneralName, ParsedExtension};
    let ParsedCriAttribute::ExtensionRequest(request) = attribute.parsed_attribute() else {
        return None;
    };
    if request.extensions.is_empty() {
        return None;
    }
    let mut names = Vec::new();
    for e in &request.extensions {
        let ParsedExtension::SubjectAlternativeName(san) = e.parsed_extension() else {
            return None;
        };
        if e.critical || san.general_names.is_empty() {
            return None;
        }
        for n in &san.general_names {
            let GeneralName::DNSName(name) = n else {
                return None;
            };
            names.push((*name).to_owned());
        }
    }
    Some(names)
}

/// `spec.usages` is client auth, with at most the key usages upstream adds, each once.
pub fn usages_ok(usages: &[String]) -> bool {
    let set: BTreeSet<&str> = usages.iter().map(String::as_str).collect();
    set.len() == usages.len()
        && set.contains(CLIENT_AUTH)
        && set.iter().all(|u| ALLOWED_USAGES.contains(u))
}

/// `spec.expirationSeconds` is unset or within [`MIN_EXPIRATION_SECONDS`,
/// `MAX_EXPIRATION_SECONDS`].
pub fn expiration_ok(seconds: Option<i32>) -> bool {
    seconds.is_none_or(|s| (MIN_EXPIRATION_SECONDS..=MAX_EXPIRATION_SECONDS).contains(&s))
}

/// Whether the requester (set by kube-apiserver from the authenticated caller, never by the
/// caller) is `cluster`'s klusterlet registration agent: user
/// `system:open-cluster-management:<cluster>:<agent>` in groups
/// `system:open-cluster-management:<cluster>` and [`MANAGED_CLUSTERS_GROUP`], as upstream's
/// registration issues it. (Upstream's add-on approver takes any user name that starts with
/// `system:open-cluster-management:<cluster>`, which cluster `c1` shares with `c10`'s agents.)
pub fn requester_is_cluster_agent(
    username: Option<&str>,
    groups: &[String],
    cluster: &str,
) -> bool {
    let cluster_group = super::cluster_group(cluster);
    let agent = username.and_then(|u| u.strip_prefix(cluster_group.as_str())?.strip_prefix(':'));
    agent.is_some_and(|a| !a.is_empty() && !a.contains(':'))
        && groups.contains(&cluster_group)
        && groups.iter().any(|g| g == MANAGED_CLUSTERS_GROUP)
}

/// Parsed requests kept between passes, by CSR uid and resourceVersion: a pending CSR (one
/// an attacker made malformed, say) is parsed once, not at every pass. Holds only the CSRs the
/// last pass looked at (one that went is forgotten when the pass ends), so it is bounded by
/// the CSRs on the hub.
#[derive(Debug, Default)]
pub struct Requests {
    previous: HashMap<String, ParsedRequest>,
    current: HashMap<String, ParsedRequest>,
}

#[derive(Debug, Clone)]
struct ParsedRequest {
    resource_version: Option<String>,
    subject: Result<Subject, RequestError>,
}

impl Requests {
    /// `csr`'s request parsed, from the cache when its uid and resourceVersion are known.
    pub fn parse(&mut self, csr: &CertificateSigningRequest) -> Result<Subject, RequestError> {
        let meta = &csr.metadata;
        let Some(key) = meta.uid.clone().or_else(|| meta.name.clone()) else {
            return parse_request(&csr.spec.request.0);
        };
        if let Some(p) = self
            .current
            .get(&key)
            .filter(|p| p.resource_version == meta.resource_version)
        {
            return p.subject.clone();
        }
        let parsed = match self.previous.remove(&key) {
            Some(p) if p.resource_version == meta.resource_version => p,
            _ => ParsedRequest {
                resource_version: meta.resource_version.clone(),
                subject: parse_request(&csr.spec.request.0),
            },
        };
        let subject = parsed.subject.clone();
        self.current.insert(key, parsed);
        subject
    }

    /// Ends a pass: what it did not look at goes.
    pub fn rotate(&mut self) {
        self.previous = std::mem::take(&mut self.current);
    }

    /// Entries kept after the last pass.
    pub fn len(&self) -> usize {
        self.previous.len() + self.current.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A CSR of this add-on that the manager does not approve, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefusedCsr {
    pub name: String,
    pub uid: String,
    pub refusal: CsrRefusal,
}

/// The refusals already reported, so that each CSR gets its event and log line once (again
/// only when the reason changes). Holds only CSRs that are still refused: bounded by the
/// CSRs on the hub, forgotten when one is deleted, approved or denied.
#[derive(Debug, Default)]
pub struct Reported {
    seen: HashMap<String, CsrRefusal>,
}

impl Reported {
    /// CSRs whose refusal is remembered.
    pub fn len(&self) -> usize {
        self.seen.len()
    }

    pub fn is_empty(&self) -> bool {
        self.seen.is_empty()
    }

    /// The refusals of this pass not reported yet; remembers them, forgets the rest.
    pub fn fresh<'a>(&mut self, refused: &'a [RefusedCsr]) -> Vec<&'a RefusedCsr> {
        let fresh = refused
            .iter()
            .filter(|r| self.seen.get(&r.uid) != Some(&r.refusal))
            .collect();
        self.seen = refused
            .iter()
            .map(|r| (r.uid.clone(), r.refusal.clone()))
            .collect();
        fresh
    }
}

/// Where events about cluster-scoped objects go (client-go's recorder does the same).
pub const EVENT_NAMESPACE: &str = "default";

/// A Warning event (events.k8s.io/v1) regarding the refused CSR, naming the reason, at `now`
/// (its time and, once published, the suffix of its name).
pub fn refusal_occurrence(r: &RefusedCsr, now: Timestamp) -> Occurrence {
    Occurrence {
        namespace: EVENT_NAMESPACE.to_owned(),
        regarding: ObjectReference {
            api_version: Some("certificates.k8s.io/v1".to_owned()),
            kind: Some("CertificateSigningRequest".to_owned()),
            name: Some(r.name.clone()),
            uid: Some(r.uid.clone()),
            ..ObjectReference::default()
        },
        related: None,
        type_: EventType::Warning,
        reason: r.refusal.reason().into(),
        action: "NotApproved".into(),
        note: format!("not approved: {}", r.refusal),
        at: now,
    }
}

/// The refusal to report for `csr`, when it is one (a decided CSR is not ours to talk about).
pub fn refused(csr: &CertificateSigningRequest, refusal: CsrRefusal) -> Option<RefusedCsr> {
    if refusal == CsrRefusal::Decided {
        return None;
    }
    Some(RefusedCsr {
        name: csr.metadata.name.clone()?,
        uid: csr
            .metadata
            .uid
            .clone()
            .or_else(|| csr.metadata.name.clone())?,
        refusal,
    })
}
