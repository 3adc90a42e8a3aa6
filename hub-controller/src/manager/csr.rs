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
//! DNS subject alternative names (upstream's agent asks for `<addon>.addon.open-cluster-management.io`).
//! `tests/csr-vectors/` holds what Go reads from such inputs; the tests below hold us to it.

use std::collections::{BTreeSet, HashMap};

use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use thiserror::Error;
use x509_parser::asn1_rs::Tag;
use x509_parser::certification_request::X509CertificationRequest;
use x509_parser::oid_registry::{OID_X509_COMMON_NAME, OID_X509_ORGANIZATION_NAME};
use x509_parser::prelude::FromDer;

use super::registration::CsrRefusal;

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
}

/// The subject of an accepted request: what the certificate will say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subject {
    pub common_name: String,
    pub organizations: Vec<String>,
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
    if !info.attributes().iter().all(only_dns_names) {
        return Err(RequestError::Attributes);
    }
    let mut cns = Vec::new();
    let mut organizations = Vec::new();
    for attr in info.subject.iter_attributes() {
        // Compared as bytes with what we expect: only string types whose bytes are the text.
        let value = match attr.attr_value().tag() {
            Tag::Utf8String | Tag::PrintableString => {
                std::str::from_utf8(attr.as_slice()).map_err(|_| RequestError::StringType)?
            }
            _ => return Err(RequestError::StringType),
        };
        if *attr.attr_type() == OID_X509_COMMON_NAME {
            cns.push(value.to_owned());
        } else if *attr.attr_type() == OID_X509_ORGANIZATION_NAME {
            organizations.push(value.to_owned());
        } else {
            return Err(RequestError::SubjectAttribute(
                attr.attr_type().to_id_string(),
            ));
        }
    }
    match <[String; 1]>::try_from(cns) {
        Ok([common_name]) => Ok(Subject {
            common_name,
            organizations,
        }),
        Err(cns) => Err(RequestError::CommonNames(cns.len())),
    }
}

/// An attribute upstream's registration agent puts in every add-on request: an extension
/// request whose only extension is a subjectAltName of DNS names
/// (`<addon>.addon.open-cluster-management.io`). Harmless to the identity: kube-apiserver
/// authenticates a client certificate by its subject alone.
fn only_dns_names(attribute: &x509_parser::cri_attributes::X509CriAttribute<'_>) -> bool {
    use x509_parser::cri_attributes::ParsedCriAttribute;
    use x509_parser::extensions::{GeneralName, ParsedExtension};
    let ParsedCriAttribute::ExtensionRequest(request) = attribute.parsed_attribute() else {
        return false;
    };
    !request.extensions.is_empty()
        && request
            .extensions
            .iter()
            .all(|e| match e.parsed_extension() {
                ParsedExtension::SubjectAlternativeName(san) => {
                    !e.critical
                        && !san.general_names.is_empty()
                        && san
                            .general_names
                            .iter()
                            .all(|n| matches!(n, GeneralName::DNSName(_)))
                }
                _ => false,
            })
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
    let cluster_group = super::registration::cluster_group(cluster);
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

/// Logs each refusal and publishes it as an event, once per CSR and reason.
pub struct Reporter {
    events: kube::Api<Event>,
    controller: String,
    /// `reportingInstance`: the pod (or host) name.
    instance: String,
    reported: Reported,
}

impl Reporter {
    pub fn new(client: kube::Client, controller: &str) -> Self {
        let instance = std::env::var("POD_NAME")
            .or_else(|_| std::env::var("HOSTNAME"))
            .unwrap_or_else(|_| controller.to_owned());
        Self {
            events: kube::Api::namespaced(client, EVENT_NAMESPACE),
            controller: controller.to_owned(),
            instance,
            reported: Reported::default(),
        }
    }

    /// CSRs whose refusal is remembered (the `csr_refusals` cache).
    pub fn len(&self) -> usize {
        self.reported.len()
    }

    pub fn is_empty(&self) -> bool {
        self.reported.is_empty()
    }

    /// Reports the refusals of one pass that were not reported yet. An event that cannot be
    /// published is logged; it is not retried (the refusal's log line stands).
    pub async fn report(&mut self, refused: &[RefusedCsr]) {
        for r in self.reported.fresh(refused) {
            tracing::warn!(
                csr = %r.name,
                reason = r.refusal.reason(),
                "not approving the add-on's certificate request: {}",
                r.refusal
            );
            let event = refusal_event(r, &self.controller, &self.instance);
            if let Err(e) = self
                .events
                .create(&kube::api::PostParams::default(), &event)
                .await
            {
                tracing::warn!(csr = %r.name, error = %e, "publishing the refusal event failed");
            }
        }
    }
}

/// Where events about cluster-scoped objects go (client-go's recorder does the same).
pub const EVENT_NAMESPACE: &str = "default";

/// A Warning event (events.k8s.io/v1) regarding the refused CSR, naming the reason.
pub fn refusal_event(r: &RefusedCsr, controller: &str, instance: &str) -> Event {
    let now = jiff::Timestamp::now();
    Event {
        metadata: ObjectMeta {
            name: Some(format!("{}.{:x}", r.name, now.as_nanosecond())),
            namespace: Some(EVENT_NAMESPACE.to_owned()),
            ..ObjectMeta::default()
        },
        event_time: Some(MicroTime(now)),
        type_: Some("Warning".to_owned()),
        reason: Some(r.refusal.reason().to_owned()),
        action: Some("NotApproved".to_owned()),
        note: Some(format!("not approved: {}", r.refusal)),
        regarding: Some(ObjectReference {
            api_version: Some("certificates.k8s.io/v1".to_owned()),
            kind: Some("CertificateSigningRequest".to_owned()),
            name: Some(r.name.clone()),
            uid: Some(r.uid.clone()),
            ..ObjectReference::default()
        }),
        reporting_controller: Some(controller.to_owned()),
        reporting_instance: Some(instance.to_owned()),
        ..Event::default()
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const CN: &[u64] = &[2, 5, 4, 3];
    const O: &[u64] = &[2, 5, 4, 10];
    const OU: &[u64] = &[2, 5, 4, 11];

    fn pem_of(der: &[u8]) -> Vec<u8> {
        testenv::pem_encode("CERTIFICATE REQUEST", der).into_bytes()
    }

    fn request(subject: &[(&[u64], &str)], attributes: &[u8]) -> Vec<u8> {
        testenv::certificate_request_der(subject, attributes)
            .expect("a request")
            .0
    }

    fn sha256_hex(data: &[u8]) -> String {
        ring::digest::digest(&ring::digest::SHA256, data)
            .as_ref()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    /// A block as Go's `pem.Decode` returns it: type, number of headers, bytes, length of
    /// the rest.
    type GoBlock = (Vec<u8>, usize, Vec<u8>, usize);

    /// Go's `getLine`: the line without its `\n` or `\r\n` and trailing spaces and tabs, the
    /// rest, and how many bytes were consumed.
    fn get_line(data: &[u8]) -> (&[u8], &[u8], usize) {
        let (mut i, j) = match data.iter().position(|&b| b == b'\n') {
            Some(i) => (i, i + 1),
            None => (data.len(), data.len()),
        };
        if j > i && i > 0 && data[i - 1] == b'\r' {
            i -= 1;
        }
        let mut line = &data[..i];
        while let [head @ .., b' ' | b'\t'] = line {
            line = head;
        }
        (line, &data[j..], j)
    }

    fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
        hay.windows(needle.len()).position(|w| w == needle)
    }

    fn rfind(hay: &[u8], needle: &[u8]) -> Option<usize> {
        hay.windows(needle.len()).rposition(|w| w == needle)
    }

    /// Go's `base64.StdEncoding.Decode` after PEM took out spaces and tabs: skips CR and LF,
    /// needs padding, takes any trailing bits.
    fn go_base64(data: &[u8]) -> Option<Vec<u8>> {
        let s: Vec<u8> = data
            .iter()
            .copied()
            .filter(|b| !matches!(b, b'\r' | b'\n'))
            .collect();
        let pad = s.iter().position(|&b| b == b'=').unwrap_or(s.len());
        let padded = s.len().is_multiple_of(4)
            && s[pad..].iter().all(|&b| b == b'=')
            && (pad == s.len() || (s.len() - pad <= 2 && pad % 4 >= 2));
        if !padded {
            return None;
        }
        let mut spec = data_encoding::BASE64.specification();
        spec.check_trailing_bits = false;
        spec.encoding().ok()?.decode(&s).ok()
    }

    /// Go 1.26's `encoding/pem.Decode`, transcribed as the oracle of the property test (and
    /// checked against what Go itself printed, in `go_vectors`).
    fn go_decode(data: &[u8]) -> Option<GoBlock> {
        const BEGIN_LINE: &[u8] = b"-----BEGIN ";
        const PEM_END: &[u8] = b"\n-----END ";
        const EOL: &[u8] = b"-----";
        let mut rest = data;
        let mut end_trailer: isize = 0;
        loop {
            if end_trailer < 0 || end_trailer as usize > rest.len() {
                return None;
            }
            rest = &rest[end_trailer as usize..];
            let end = find(rest, PEM_END)?;
            end_trailer = (end + PEM_END.len()) as isize;
            let Some(begin) = rfind(&rest[..end], BEGIN_LINE) else {
                continue;
            };
            if begin > 0 && rest[begin - 1] != b'\n' {
                continue;
            }
            let skip = (begin + BEGIN_LINE.len()) as isize;
            rest = &rest[skip as usize..];
            let mut end = end as isize - skip;
            end_trailer -= skip;
            let (type_line, next, consumed) = get_line(rest);
            rest = next;
            end -= consumed as isize;
            end_trailer -= consumed as isize;
            let Some(typ) = type_line.strip_suffix(EOL) else {
                continue;
            };
            let mut headers = BTreeSet::new();
            loop {
                if rest.is_empty() {
                    return None;
                }
                let (line, next, consumed) = get_line(rest);
                let Some(colon) = line.iter().position(|&b| b == b':') else {
                    break;
                };
                headers.insert(line[..colon].trim_ascii().to_vec());
                rest = next;
                end -= consumed as isize;
                end_trailer -= consumed as isize;
            }
            if !headers.is_empty() && end < 0 {
                continue;
            }
            let trailer = &rest[end_trailer as usize..];
            let len = typ.len() + EOL.len();
            if trailer.len() < len {
                continue;
            }
            let (trailer, rest_of_end_line) = trailer.split_at(len);
            if !trailer.starts_with(typ) || !trailer.ends_with(EOL) {
                continue;
            }
            if !get_line(rest_of_end_line).0.is_empty() {
                continue;
            }
            let mut bytes = Vec::new();
            if end > 0 {
                let b64: Vec<u8> = rest[..end as usize]
                    .iter()
                    .copied()
                    .filter(|b| !matches!(b, b' ' | b'\t'))
                    .collect();
                match go_base64(&b64) {
                    Some(b) => bytes = b,
                    None => continue,
                }
            }
            let after = &rest[(end + PEM_END.len() as isize - 1) as usize..];
            return Some((typ.to_vec(), headers.len(), bytes, get_line(after).1.len()));
        }
    }

    /// Whatever we accept, Go reads as that same single block.
    fn agrees_with_go(input: &[u8], go: Option<&GoBlock>) -> Result<(), String> {
        match (pem_der(input), go) {
            (Err(_), _) => Ok(()),
            (Ok(der), Some((typ, 0, bytes, _)))
                if typ == b"CERTIFICATE REQUEST" && *bytes == der =>
            {
                Ok(())
            }
            (Ok(_), go) => Err(format!("accepted, but Go reads {go:?}")),
        }
    }

    struct Vector {
        name: String,
        input: Vec<u8>,
        valid: bool,
        /// Type, headers, SHA-256 of the bytes, rest length.
        block: Option<(String, usize, String, usize)>,
    }

    fn vectors() -> Vec<Vector> {
        let text = include_str!("../../../tests/csr-vectors/vectors.json");
        let json: serde_json::Value = serde_json::from_str(text).expect("vectors.json");
        let list = json["vectors"].as_array().expect("a vector list");
        list.iter()
            .map(|v| Vector {
                name: v["name"].as_str().expect("name").to_owned(),
                input: data_encoding::BASE64
                    .decode(v["input"].as_str().expect("input").as_bytes())
                    .expect("base64 input"),
                valid: v["valid"].as_bool().expect("valid"),
                block: v["block"].as_object().map(|b| {
                    (
                        b["type"].as_str().expect("type").to_owned(),
                        b["headers"].as_u64().expect("headers") as usize,
                        b["sha256"].as_str().expect("sha256").to_owned(),
                        b["rest"].as_u64().expect("rest") as usize,
                    )
                }),
            })
            .collect()
    }

    #[test]
    fn go_vectors() {
        let vectors = vectors();
        assert!(vectors.len() > 100, "{} vectors", vectors.len());
        for v in &vectors {
            // The oracle of the property test is Go itself on every vector.
            let model = go_decode(&v.input).map(|(t, h, b, r)| {
                (
                    String::from_utf8_lossy(&t).into_owned(),
                    h,
                    sha256_hex(&b),
                    r,
                )
            });
            assert_eq!(model, v.block, "the Go model on {:?}", v.name);
            // What we accept, Go reads alike.
            let accepted = pem_der(&v.input);
            if let Ok(der) = &accepted {
                let go = v.block.as_ref();
                assert!(
                    go.is_some_and(|(t, h, sum, _)| t == "CERTIFICATE REQUEST"
                        && *h == 0
                        && *sum == sha256_hex(der)),
                    "{:?} accepted, but Go reads {go:?}",
                    v.name
                );
            }
            if v.valid {
                let subject = parse_request(&v.input)
                    .unwrap_or_else(|e| panic!("{:?} must be accepted: {e}", v.name));
                assert_eq!(subject.organizations.len(), 2, "{:?}: {subject:?}", v.name);
            } else if !v.name.starts_with("mutation") {
                assert!(accepted.is_err(), "{:?} must be refused", v.name);
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]
        /// Framing mutations of a valid request: inserted, deleted and replaced tokens.
        #[test]
        fn accepted_framing_is_what_go_reads(
            edits in prop::collection::vec((0usize..3, 0.0f64..1.0, 0usize..16, 1usize..8), 1..4)
        ) {
            let tokens: [&[u8]; 16] = [
                b"\n", b"\r\n", b"\r", b" ", b"\t", b"-", b"-----", b"=", b"A", b":",
                b"x: y\n", END, BEGIN, b"-----END X-----\n", b"\n", b"\r\n\r\n",
            ];
            let mut input = VALID.with(Clone::clone);
            for (op, at, token, len) in edits {
                let p = ((input.len() as f64) * at) as usize;
                match op {
                    0 => { input.splice(p..p, tokens[token].iter().copied()); }
                    1 => { input.drain(p..(p + len).min(input.len())); }
                    _ => if p < input.len() { input[p] = tokens[token][0]; },
                }
            }
            let go = go_decode(&input);
            prop_assert!(agrees_with_go(&input, go.as_ref()).is_ok(),
                "{:?}: {:?}", String::from_utf8_lossy(&input), agrees_with_go(&input, go.as_ref()));
        }
    }

    thread_local! {
        static VALID: Vec<u8> = pem_of(&request(&[(O, "g"), (CN, "u")], &[]));
    }

    #[test]
    fn requests_must_be_exactly_what_they_say() {
        let good = request(&[(O, "g1"), (O, "g2"), (CN, "user")], &[]);
        assert_eq!(
            parse_request(&pem_of(&good)),
            Ok(Subject {
                common_name: "user".into(),
                organizations: vec!["g1".into(), "g2".into()],
            })
        );
        let mut bad_signature = good.clone();
        if let Some(last) = bad_signature.last_mut() {
            *last ^= 1;
        }
        assert!(matches!(
            parse_request(&pem_of(&bad_signature)),
            Err(RequestError::Signature(_))
        ));
        let trailing = [&good[..], &[0, 0]].concat();
        assert_eq!(
            parse_request(&pem_of(&trailing)),
            Err(RequestError::TrailingBytes(2))
        );
        assert!(matches!(
            parse_request(&good),
            Err(RequestError::Framing(_))
        ));
        assert!(matches!(
            parse_request(&pem_of(&good[..good.len() - 1])),
            Err(RequestError::Der(_))
        ));
        let ou = request(&[(OU, "x"), (CN, "user")], &[]);
        assert_eq!(
            parse_request(&pem_of(&ou)),
            Err(RequestError::SubjectAttribute("2.5.4.11".into()))
        );
        let two_cns = request(&[(CN, "a"), (CN, "b")], &[]);
        assert_eq!(
            parse_request(&pem_of(&two_cns)),
            Err(RequestError::CommonNames(2))
        );
        let no_cn = request(&[(O, "g")], &[]);
        assert_eq!(
            parse_request(&pem_of(&no_cn)),
            Err(RequestError::CommonNames(0))
        );
        // challengePassword "x".
        let password = [
            0x30, 0x10, 0x06, 0x09, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x09, 0x07, 0x31,
            0x03, 0x0c, 0x01, 0x78,
        ];
        let with_attributes = request(&[(CN, "user")], &password);
        assert_eq!(
            parse_request(&pem_of(&with_attributes)),
            Err(RequestError::Attributes)
        );
        // What upstream's registration agent sends (Go's x509.CreateCertificateRequest with
        // DNSNames): an extensionRequest with a subjectAltName of one DNS name. Accepted; an IP
        // address in it is not.
        let dns = extension_request(&[0x82, 0x01, b'a']);
        assert_eq!(
            parse_request(&pem_of(&request(&[(CN, "user"), (O, "g")], &dns))),
            Ok(Subject {
                common_name: "user".into(),
                organizations: vec!["g".into()],
            })
        );
        let ip = extension_request(&[0x87, 0x04, 127, 0, 0, 1]);
        assert_eq!(
            parse_request(&pem_of(&request(&[(CN, "user")], &ip))),
            Err(RequestError::Attributes)
        );
    }

    /// The DER of an extensionRequest attribute (PKCS#9) holding one subjectAltName extension
    /// whose GeneralNames content is `names` (each a tagged name, short lengths only).
    fn extension_request(names: &[u8]) -> Vec<u8> {
        fn tlv(tag: u8, content: &[u8]) -> Vec<u8> {
            let mut out = vec![tag, u8::try_from(content.len()).unwrap()];
            out.extend_from_slice(content);
            out
        }
        let san_oid = [0x06, 0x03, 0x55, 0x1d, 0x11];
        let extension = tlv(
            0x30,
            &[&san_oid[..], &tlv(0x04, &tlv(0x30, names))].concat(),
        );
        let extensions = tlv(0x30, &extension);
        let pkcs9_extension_request = [
            0x06, 0x09, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x09, 0x0e,
        ];
        tlv(
            0x30,
            &[&pkcs9_extension_request[..], &tlv(0x31, &extensions)].concat(),
        )
    }

    #[test]
    fn usages_expiration_and_requester() {
        let u = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert!(usages_ok(&u(&["client auth"])));
        assert!(usages_ok(&u(&[
            "digital signature",
            "key encipherment",
            "client auth"
        ])));
        assert!(!usages_ok(&u(&[])));
        assert!(!usages_ok(&u(&["digital signature"])));
        assert!(!usages_ok(&u(&["client auth", "server auth"])));
        assert!(!usages_ok(&u(&["client auth", "client auth"])));
        assert!(expiration_ok(None));
        assert!(expiration_ok(Some(600)));
        assert!(expiration_ok(Some(MAX_EXPIRATION_SECONDS)));
        assert!(!expiration_ok(Some(599)));
        assert!(!expiration_ok(Some(MAX_EXPIRATION_SECONDS + 1)));

        let groups = |c: &str| {
            u(&[
                &format!("system:open-cluster-management:{c}"),
                MANAGED_CLUSTERS_GROUP,
            ])
        };
        let ok = |user: &str, g: &[String]| requester_is_cluster_agent(Some(user), g, "c1");
        assert!(ok(
            "system:open-cluster-management:c1:agent1",
            &groups("c1")
        ));
        assert!(!ok("system:open-cluster-management:c1:", &groups("c1")));
        assert!(!ok("system:open-cluster-management:c1:a:b", &groups("c1")));
        assert!(!ok(
            "system:open-cluster-management:c10:agent1",
            &groups("c1")
        ));
        assert!(!ok(
            "system:open-cluster-management:c1:agent1",
            &groups("c10")
        ));
        assert!(!ok(
            "system:open-cluster-management:c1:agent1",
            &groups("c1")[..1]
        ));
        assert!(!ok("mallory", &groups("c1")));
        assert!(!requester_is_cluster_agent(None, &groups("c1"), "c1"));
    }

    #[test]
    fn a_request_is_parsed_once_per_version_and_forgotten_when_gone() {
        let csr = |uid: &str, rv: &str, request: &[u8]| {
            let mut c = CertificateSigningRequest::default();
            c.metadata.uid = Some(uid.into());
            c.metadata.name = Some(format!("csr-{uid}"));
            c.metadata.resource_version = Some(rv.into());
            c.spec.request = k8s_openapi::ByteString(request.to_vec());
            c
        };
        let mut requests = Requests::default();
        let bad = requests.parse(&csr("a", "1", b"not a pem"));
        assert!(bad.is_err());
        requests.rotate();
        // Same uid and version: the verdict is reused (the bytes are not read again).
        let (pem, _) = testenv::certificate_request("u", &["g"]).expect("a request");
        let good = pem.into_bytes();
        assert_eq!(requests.parse(&csr("a", "1", &good)), bad);
        // A new version is parsed again.
        let parsed = requests.parse(&csr("a", "2", &good));
        assert!(parsed.is_ok(), "{parsed:?}");
        for n in 0..100 {
            let _ = requests.parse(&csr(&n.to_string(), "1", b"x"));
        }
        requests.rotate();
        assert_eq!(requests.len(), 101);
        // A pass without them: gone.
        let _ = requests.parse(&csr("a", "2", &good));
        requests.rotate();
        assert_eq!(requests.len(), 1);
        requests.rotate();
        assert!(requests.is_empty());
    }

    #[test]
    fn each_refusal_is_reported_once_and_forgotten_when_gone() {
        let r = |uid: &str, refusal: CsrRefusal| RefusedCsr {
            name: format!("csr-{uid}"),
            uid: uid.into(),
            refusal,
        };
        let mut reported = Reported::default();
        let pass = [r("a", CsrRefusal::Labels), r("b", CsrRefusal::Labels)];
        assert_eq!(reported.fresh(&pass).len(), 2);
        assert!(reported.fresh(&pass).is_empty());
        // A new reason is news; a CSR that went away is forgotten.
        let next = [r("a", CsrRefusal::NoAddOn("c1".into()))];
        assert_eq!(reported.fresh(&next), [&next[0]]);
        assert_eq!(reported.seen.len(), 1);
        assert_eq!(reported.fresh(&pass).len(), 2);

        let event = refusal_event(&pass[0], "resource-usage-hub", "pod-1");
        assert_eq!(event.reason.as_deref(), Some("MissingLabels"));
        assert_eq!(event.type_.as_deref(), Some("Warning"));
        assert_eq!(
            event.regarding.and_then(|o| o.name).as_deref(),
            Some("csr-a")
        );
        assert!(event.note.is_some_and(|n| n.contains("not labelled")));
    }
}
