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
        (Ok(der), Some((typ, 0, bytes, _))) if typ == b"CERTIFICATE REQUEST" && *bytes == der => {
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
    let text = include_str!("../../../../../tests/csr-vectors/vectors.json");
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
            dns_names: vec![],
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
        0x30, 0x10, 0x06, 0x09, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x09, 0x07, 0x31, 0x03,
        0x0c, 0x01, 0x78,
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
            dns_names: vec!["a".into()],
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

    let now = Timestamp::from_second(1_800_000_000).unwrap();
    let event = refusal_occurrence(&pass[0], now);
    assert_eq!(event.at, now);
    assert_eq!(event.namespace, EVENT_NAMESPACE);
    assert_eq!(event.reason, "MissingLabels");
    assert_eq!(event.type_, EventType::Warning);
    assert_eq!(event.regarding.name.as_deref(), Some("csr-a"));
    assert!(event.note.contains("not labelled"));
}

/// A DER element with any identifier octet (definite lengths up to 65535).
fn element(tag: u8, content: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    match content.len() {
        n @ 0..=0x7f => out.push(n as u8),
        n @ 0x80..=0xff => out.extend([0x81, n as u8]),
        n => out.extend([0x82, (n >> 8) as u8, n as u8]),
    }
    out.extend_from_slice(content);
    out
}

/// An AttributeTypeAndValue of `oid` (DER content) with `value` under identifier `tag`.
fn atv(oid: &[u8], tag: u8, value: &str) -> Vec<u8> {
    element(
        0x30,
        &[element(0x06, oid), element(tag, value.as_bytes())].concat(),
    )
}

fn name(rdns: &[Vec<Vec<u8>>]) -> Vec<u8> {
    let sets: Vec<u8> = rdns
        .iter()
        .flat_map(|set| element(0x31, &set.concat()))
        .collect();
    element(0x30, &sets)
}

fn with_name(name: &[u8]) -> Result<Subject, RequestError> {
    let der = testenv::certificate_request_der_with_name(name, &[])
        .expect("a request")
        .0;
    parse_request(&pem_of(&der))
}

/// Subjects Go's `x509.ParseCertificateRequest` reads otherwise than a lenient DER reader, or
/// that are not DER. Checked with Go 1.26: it takes each request; for the `[APPLICATION 12]`,
/// context-specific and constructed values, and for a second value in one attribute, its
/// Subject.Organization is `["g1"]` only (a value that is not a primitive universal string is
/// left nil and skipped, elements after an attribute's value are ignored), while a lenient
/// reader sees `g1` and `g2`. All refused, as are string types we do not compare (IA5String)
/// and a PrintableString outside its alphabet. Go's own encoding (both organizations in one
/// multi-valued RDN) is read as it is.
#[test]
fn a_subject_is_read_only_in_the_encoding_go_reads_alike() {
    let (cn, o) = (&[0x55, 0x04, 0x03][..], &[0x55, 0x04, 0x0a][..]);
    let good = name(&[
        vec![atv(o, 0x13, "g1"), atv(o, 0x13, "g2")],
        vec![atv(cn, 0x0c, "user")],
    ]);
    assert_eq!(
        with_name(&good),
        Ok(Subject {
            common_name: "user".into(),
            organizations: vec!["g1".into(), "g2".into()],
            dns_names: vec![],
        })
    );
    let second_group = |tag: u8, value: &[u8]| {
        let odd = element(0x30, &[element(0x06, o), element(tag, value)].concat());
        name(&[vec![atv(o, 0x0c, "g1"), odd], vec![atv(cn, 0x0c, "user")]])
    };
    for (what, subject) in [
        ("[APPLICATION 12]", second_group(0x4c, b"g2")),
        ("[12] context-specific", second_group(0x8c, b"g2")),
        (
            "constructed UTF8String",
            second_group(0x2c, &element(0x0c, b"g2")),
        ),
        ("an IA5String", second_group(0x16, b"g2")),
        ("a PrintableString with @", second_group(0x13, b"g@2")),
    ] {
        assert!(
            matches!(
                with_name(&subject),
                Err(RequestError::StringType | RequestError::Ambiguous(_))
            ),
            "{what}: {:?}",
            with_name(&subject)
        );
    }
    let trailing_value = name(&[
        vec![element(
            0x30,
            &[element(0x06, o), element(0x0c, b"g1"), element(0x0c, b"g2")].concat(),
        )],
        vec![atv(cn, 0x0c, "user")],
    ]);
    let empty_set = name(&[vec![], vec![atv(cn, 0x0c, "user")]]);
    let mut long_length = vec![0x30, 0x81];
    let inner = name(&[vec![atv(cn, 0x0c, "user")]]);
    long_length.push((inner.len() - 2) as u8);
    long_length.extend_from_slice(&inner[2..]);
    for (what, subject) in [
        ("a second value in an attribute", trailing_value),
        ("an empty RDN", empty_set),
        ("a length in more octets than needed", long_length),
    ] {
        assert!(
            matches!(with_name(&subject), Err(RequestError::Ambiguous(_))),
            "{what}: {:?}",
            with_name(&subject)
        );
    }
}
