//! Attacks on the add-on manager's CSR approval, run against a real apiserver: each hostile
//! request is created as the attacker's own identity (a cluster's registration agent, or a
//! user outside it), while the manager binary runs with exactly the chart's RBAC. None may be
//! approved (the apiserver here runs no signer, so unapproved = no certificate); each gets an
//! event and a log line naming the reason, once. One good request in the same run is
//! approved, so the test cannot pass by approving nothing.

mod common;

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::events::v1::Event;
use kube::Client;
use kube::api::{Api, PostParams};
use ocm_api::addon::v1alpha1::ManagedClusterAddOn;
use resource_usage_hub::manager::registration::{agent_dns_name, default_groups, default_user};
use serde_json::json;
use testenv::{ControlPlane, eventually};

const ADDON: &str = "csr-attack";
const DEADLINE: Duration = Duration::from_secs(60);
const SIGNER: &str = "kubernetes.io/kube-apiserver-client";
const AGENT_USAGES: [&str; 3] = ["digital signature", "key encipherment", "client auth"];
const BEGIN: &str = "-----BEGIN CERTIFICATE REQUEST-----";
const END: &str = "-----END CERTIFICATE REQUEST-----";
const CN: &[u64] = &[2, 5, 4, 3];
const O: &[u64] = &[2, 5, 4, 10];

struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// An identity: user and groups.
type Identity = (String, Vec<String>);

/// The klusterlet's registration agent of `cluster` on the hub, as upstream's registration
/// names it.
fn registration_agent(cluster: &str) -> Identity {
    (
        format!("system:open-cluster-management:{cluster}:agent1"),
        vec![
            format!("system:open-cluster-management:{cluster}"),
            "system:open-cluster-management:managed-clusters".into(),
        ],
    )
}

/// A managed cluster the hub accepts, its namespace, and this add-on on it.
async fn cluster_with_addon(client: &Client, prefix: &str) -> String {
    let name = common::accepted_cluster(client, prefix).await;
    let mca: ManagedClusterAddOn = serde_json::from_value(json!({
        "apiVersion": "addon.open-cluster-management.io/v1alpha1",
        "kind": "ManagedClusterAddOn",
        "metadata": {"name": ADDON, "namespace": name},
        "spec": {}
    }))
    .expect("an mca");
    Api::<ManagedClusterAddOn>::namespaced(client.clone(), &name)
        .create(&PostParams::default(), &mca)
        .await
        .expect("create mca");
    name
}

/// A request (DER) for `cn` in `orgs`.
fn request_der(cn: &str, orgs: &[&str]) -> Vec<u8> {
    let mut subject: Vec<(&[u64], &str)> = orgs.iter().map(|o| (O, *o)).collect();
    subject.push((CN, cn));
    testenv::certificate_request_der(&subject, &[])
        .expect("a request")
        .0
}

/// A DER element (definite lengths up to 65535).
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

/// A request (DER) for `cn` in `orgs` asking for the subject alternative DNS names `dns`, as
/// Go's `x509.CreateCertificateRequest` encodes them (an extensionRequest attribute).
fn request_with_dns(cn: &str, orgs: &[&str], dns: &[&str]) -> Vec<u8> {
    let names: Vec<u8> = dns
        .iter()
        .flat_map(|n| element(0x82, n.as_bytes()))
        .collect();
    let san = element(
        0x30,
        &[
            element(0x06, &[0x55, 0x1d, 0x11]),
            element(0x04, &element(0x30, &names)),
        ]
        .concat(),
    );
    let attribute = element(
        0x30,
        &[
            element(
                0x06,
                &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x09, 0x0e],
            ),
            element(0x31, &element(0x30, &san)),
        ]
        .concat(),
    );
    let mut subject: Vec<(&[u64], &str)> = orgs.iter().map(|o| (O, *o)).collect();
    subject.push((CN, cn));
    testenv::certificate_request_der(&subject, &attribute)
        .expect("a request")
        .0
}

/// A request (DER) whose subject is `cn` and the groups `g1` and `g2` (one multi-valued RDN,
/// as Go encodes them), with `g2`'s attribute encoded as `odd_group` (an AttributeTypeAndValue)
/// instead.
fn request_with_group_encoded(cn: &str, g1: &str, odd_group: &[u8]) -> Vec<u8> {
    let o = element(0x06, &[0x55, 0x04, 0x0a]);
    let first = element(0x30, &[o, element(0x0c, g1.as_bytes())].concat());
    let cn = element(
        0x30,
        &[
            element(0x06, &[0x55, 0x04, 0x03]),
            element(0x0c, cn.as_bytes()),
        ]
        .concat(),
    );
    let name = element(
        0x30,
        &[
            element(0x31, &[first, odd_group.to_vec()].concat()),
            element(0x31, &cn),
        ]
        .concat(),
    );
    testenv::certificate_request_der_with_name(&name, &[])
        .expect("a request")
        .0
}

fn pem(der: &[u8]) -> String {
    testenv::pem_encode("CERTIFICATE REQUEST", der)
}

/// The base64 lines of a PEM block, without its BEGIN and END lines.
fn body(pem: &str) -> String {
    pem.lines()
        .filter(|l| !l.starts_with("-----"))
        .map(|l| format!("{l}\n"))
        .collect()
}

/// One hostile CSR: who creates it and what it holds.
struct Case {
    /// Appended to the cluster's name to name the CSR.
    name: &'static str,
    requester: Identity,
    request: Vec<u8>,
    signer: &'static str,
    usages: Vec<&'static str>,
    expiration: Option<i32>,
    /// The event reason the manager must give.
    reason: &'static str,
    /// The apiserver itself refuses this one (its own validation or admission).
    apiserver_may_refuse: bool,
}

impl Case {
    fn new(
        name: &'static str,
        requester: &Identity,
        request: Vec<u8>,
        reason: &'static str,
    ) -> Self {
        Case {
            name,
            requester: requester.clone(),
            request,
            signer: SIGNER,
            usages: AGENT_USAGES.to_vec(),
            expiration: None,
            reason,
            apiserver_may_refuse: false,
        }
    }
}

/// Creates the CSR as its requester, labelled as cluster `labelled`'s add-on CSR.
async fn create(
    cp: &ControlPlane,
    name: &str,
    labelled: &str,
    case: &Case,
) -> Result<(), kube::Error> {
    let groups: Vec<&str> = case.requester.1.iter().map(String::as_str).collect();
    let client = cp
        .client_as(&case.requester.0, &groups)
        .expect("requester client");
    let csr: CertificateSigningRequest = serde_json::from_value(json!({
        "apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
        "metadata": {"name": name, "labels": {
            "open-cluster-management.io/cluster-name": labelled,
            "open-cluster-management.io/addon-name": ADDON}},
        "spec": {"request": k8s_openapi::ByteString(case.request.clone()),
                 "signerName": case.signer,
                 "usages": case.usages,
                 "expirationSeconds": case.expiration}
    }))
    .expect("a csr");
    Api::<CertificateSigningRequest>::all(client)
        .create(&PostParams::default(), &csr)
        .await
        .map(drop)
}

fn approved(csr: &CertificateSigningRequest) -> bool {
    csr.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Approved"))
}

/// Events regarding the CSR `name`, by reason.
async fn events_for(client: &Client, name: &str) -> Vec<String> {
    Api::<Event>::namespaced(client.clone(), "default")
        .list(&Default::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .filter_map(|e| e.reason)
        .collect()
}

#[tokio::test]
async fn hostile_requests_are_never_approved_and_each_is_reported_once() {
    let cp = testenv::shared().await;
    let admin = cp.client().expect("client");

    // The manager, as its chart's service account with the chart's RBAC.
    let system = testenv::namespace(&admin, "csr-manager")
        .await
        .expect("namespace");
    let (dir, kubeconfig) = common::as_the_manager(cp, &admin, ADDON, &system).await;
    let log = dir.join("manager.log");

    let c1 = cluster_with_addon(&admin, "csr-victim").await;
    let c2 = cluster_with_addon(&admin, "csr-victim").await;
    let attacker = registration_agent(&c1);
    let other_agent = registration_agent(&c2);
    let outsider: Identity = ("mallory".into(), vec!["team-x".into()]);
    // In the cluster's groups but not its registration agent.
    let impostor: Identity = ("impostor".into(), attacker.1.clone());
    common::allow_csr_create(&admin, &format!("csr-create-{c1}"), "Group", &attacker.1[0]).await;
    common::allow_csr_create(
        &admin,
        &format!("csr-create-{c2}"),
        "Group",
        &other_agent.1[0],
    )
    .await;
    common::allow_csr_create(
        &admin,
        &format!("csr-create-mallory-{c1}"),
        "User",
        "mallory",
    )
    .await;

    let agent = format!("{ADDON}-agent");
    let user = default_user(&c1, ADDON, &agent);
    let g = default_groups(&c1, ADDON);
    let own = request_der(&user, &[&g[0], &g[1]]);
    let own_pem = pem(&own);
    let own_body = body(&own_pem);
    let g2 = default_groups(&c2, ADDON);
    let other_pem = pem(&request_der(
        &default_user(&c2, ADDON, &agent),
        &[&g2[0], &g2[1]],
    ));
    let admin_pem = pem(&request_der(
        "kubernetes-admin",
        &["kubeadm:cluster-admins"],
    ));
    let mut bad_signature = own.clone();
    if let Some(last) = bad_signature.last_mut() {
        *last ^= 1;
    }
    let b = |s: String| s.into_bytes();
    let malformed = "MalformedRequest";

    let cases = vec![
        // Two blocks: we would read the first, Go (the apiserver, the signer) the second.
        Case::new(
            "end-label-other-cluster",
            &attacker,
            b(format!("{BEGIN}\n{own_body}-----END X-----\n{other_pem}")),
            malformed,
        ),
        Case::new(
            "end-label-admin",
            &attacker,
            b(format!("{BEGIN}\n{own_body}-----END X-----\n{admin_pem}")),
            malformed,
        ),
        Case::new(
            "junk-after-begin",
            &attacker,
            b(format!("{BEGIN} junk\n{own_body}{END}\n{admin_pem}")),
            malformed,
        ),
        Case::new(
            "junk-after-end",
            &attacker,
            b(format!("{BEGIN}\n{own_body}{END} junk\n{admin_pem}")),
            malformed,
        ),
        // Not exactly one clean block.
        Case::new(
            "trailing-block",
            &attacker,
            b(format!("{own_pem}{admin_pem}")),
            malformed,
        ),
        Case::new(
            "leading-garbage",
            &attacker,
            b(format!("garbage\n{own_pem}")),
            malformed,
        ),
        Case::new(
            "pem-headers",
            &attacker,
            b(format!(
                "{BEGIN}\nProc-Type: 4,ENCRYPTED\n\n{own_body}{END}\n"
            )),
            malformed,
        ),
        Case {
            apiserver_may_refuse: true,
            ..Case::new("der", &attacker, own.clone(), malformed)
        },
        Case {
            apiserver_may_refuse: true,
            ..Case::new(
                "bad-signature",
                &attacker,
                b(pem(&bad_signature)),
                malformed,
            )
        },
        // Well-formed, but not the agent's identity or not its certificate.
        Case::new(
            "other-cluster-cn",
            &attacker,
            b(pem(&request_der(
                &default_user(&c2, ADDON, &agent),
                &[&g[0], &g[1]],
            ))),
            "WrongCommonName",
        ),
        Case {
            apiserver_may_refuse: true,
            ..Case::new(
                "system-masters",
                &attacker,
                b(pem(&request_der(&user, &[&g[0], &g[1], "system:masters"]))),
                "WrongOrganizations",
            )
        },
        Case::new(
            "cluster-admins",
            &attacker,
            b(pem(&request_der(
                &user,
                &[&g[0], &g[1], "kubeadm:cluster-admins"],
            ))),
            "WrongOrganizations",
        ),
        Case {
            usages: vec!["digital signature", "client auth", "server auth"],
            ..Case::new("server-auth", &attacker, b(own_pem.clone()), "WrongUsages")
        },
        Case {
            signer: "example.com/agents",
            ..Case::new("other-signer", &attacker, b(own_pem.clone()), "WrongSigner")
        },
        Case {
            expiration: Some(10 * 365 * 24 * 3600),
            ..Case::new(
                "ten-years",
                &attacker,
                b(own_pem.clone()),
                "WrongExpiration",
            )
        },
        // Subject alternative names a client certificate of the agent has no use for.
        Case::new(
            "san-wildcard-service",
            &attacker,
            b(pem(&request_with_dns(
                &user,
                &[&g[0], &g[1]],
                &["*.svc.cluster.local"],
            ))),
            "WrongSubjectAltNames",
        ),
        Case::new(
            "san-kubernetes-default",
            &attacker,
            b(pem(&request_with_dns(
                &user,
                &[&g[0], &g[1]],
                &[&agent_dns_name(ADDON), "kubernetes.default.svc"],
            ))),
            "WrongSubjectAltNames",
        ),
        Case::new(
            "san-localhost",
            &attacker,
            b(pem(&request_with_dns(
                &user,
                &[&g[0], &g[1]],
                &["localhost"],
            ))),
            "WrongSubjectAltNames",
        ),
        // Subjects a lenient reader takes as both groups and Go (the signer) as the first
        // only: the second group's value tagged [APPLICATION 12] or [12] instead of
        // UTF8String (Go leaves a value that is not a universal string nil).
        Case::new(
            "group-application-tagged",
            &attacker,
            b(pem(&request_with_group_encoded(
                &user,
                &g[0],
                &element(
                    0x30,
                    &[
                        element(0x06, &[0x55, 0x04, 0x0a]),
                        element(0x4c, g[1].as_bytes()),
                    ]
                    .concat(),
                ),
            ))),
            malformed,
        ),
        Case::new(
            "group-context-tagged",
            &attacker,
            b(pem(&request_with_group_encoded(
                &user,
                &g[0],
                &element(
                    0x30,
                    &[
                        element(0x06, &[0x55, 0x04, 0x0a]),
                        element(0x8c, g[1].as_bytes()),
                    ]
                    .concat(),
                ),
            ))),
            malformed,
        ),
        // Not asked by the cluster's own registration agent.
        Case::new(
            "from-outsider",
            &outsider,
            b(own_pem.clone()),
            "NotTheClusterAgent",
        ),
        Case::new(
            "from-impostor",
            &impostor,
            b(own_pem.clone()),
            "NotTheClusterAgent",
        ),
        Case::new(
            "from-other-cluster",
            &other_agent,
            b(own_pem.clone()),
            "NotTheClusterAgent",
        ),
    ];

    let spawn = || {
        let out = std::fs::File::create(&log).expect("log file");
        let err = out.try_clone().expect("log file");
        Command::new(env!("CARGO_BIN_EXE_resource-usage-hub"))
            .args([
                "manager",
                "--addon-name",
                ADDON,
                "--agent-image",
                "example.com/agent:test",
            ])
            .args([
                "--leader-elect=false",
                "--event-debounce=50ms",
                "--log-format=json",
            ])
            .arg("--metrics-bind-address=127.0.0.1:0")
            .env("KUBECONFIG", &kubeconfig)
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err))
            .spawn()
            .map(Process)
            .expect("manager binary")
    };
    let manager = spawn();

    // The hostile ones first, so that the pass that approves the good one has seen them all.
    let csrs = Api::<CertificateSigningRequest>::all(admin.clone());
    let mut created = Vec::new();
    let mut refused_by_apiserver = Vec::new();
    for case in &cases {
        let name = format!("{c1}-{}", case.name);
        match create(cp, &name, &c1, case).await {
            Ok(()) => created.push((name, case.reason)),
            Err(kube::Error::Api(s))
                if case.apiserver_may_refuse && (400..500).contains(&s.code) =>
            {
                refused_by_apiserver.push(format!("{}: {} {}", case.name, s.code, s.reason));
            }
            Err(e) => panic!("creating {name}: {e}"),
        }
    }
    let good = format!("{c1}-good");
    create(
        cp,
        &good,
        &c1,
        &Case::new("good", &attacker, b(own_pem.clone()), ""),
    )
    .await
    .expect("the good CSR");
    eventually("the agent's own CSR is approved", DEADLINE, || async {
        csrs.get(&good).await.ok().filter(approved)
    })
    .await;
    // What upstream's registration agent sends: the same, with the one DNS name it asks for.
    let upstream = format!("{c1}-upstream");
    create(
        cp,
        &upstream,
        &c1,
        &Case::new(
            "upstream",
            &attacker,
            b(pem(&request_with_dns(
                &user,
                &[&g[0], &g[1]],
                &[&agent_dns_name(ADDON)],
            ))),
            "",
        ),
    )
    .await
    .expect("the upstream-shaped CSR");
    eventually(
        "the CSR upstream's registration agent sends is approved",
        DEADLINE,
        || async { csrs.get(&upstream).await.ok().filter(approved) },
    )
    .await;

    let mut wrongly_approved = Vec::new();
    for (name, _) in &created {
        let csr = csrs.get(name).await.expect("csr");
        if approved(&csr) || csr.status.as_ref().is_some_and(|s| s.certificate.is_some()) {
            wrongly_approved.push(name.clone());
        }
    }
    assert!(
        wrongly_approved.is_empty(),
        "approved: {wrongly_approved:?}"
    );

    // One more refusal after them, so that at least one pass ran after each was reported.
    let late = format!("{c1}-late");
    create(
        cp,
        &late,
        &c1,
        &Case::new("late", &outsider, b(own_pem.clone()), ""),
    )
    .await
    .expect("late CSR");
    created.push((late, "NotTheClusterAgent"));
    for (name, reason) in &created {
        let events = eventually(&format!("an event for {name}"), DEADLINE, || async {
            let e = events_for(&admin, name).await;
            (!e.is_empty()).then_some(e)
        })
        .await;
        assert_eq!(events, [*reason], "the events of {name}");
    }
    // Each once, also after the passes the late one caused.
    for (name, reason) in &created {
        assert_eq!(
            events_for(&admin, name).await,
            [*reason],
            "the events of {name}"
        );
    }
    // Each logged once, naming the reason.
    let refusals = |text: &str| -> Vec<(String, String)> {
        text.lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|l| {
                l["message"]
                    .as_str()
                    .is_some_and(|m| m.starts_with("not approving"))
            })
            .map(|l| {
                (
                    l["csr"].as_str().unwrap_or_default().to_owned(),
                    l["reason"].as_str().unwrap_or_default().to_owned(),
                )
            })
            .collect()
    };
    let logged = eventually("each refusal's log line", DEADLINE, || async {
        let logged = refusals(&std::fs::read_to_string(&log).ok()?);
        created
            .iter()
            .all(|(name, _)| logged.iter().any(|(n, _)| n == name))
            .then_some(logged)
    })
    .await;
    for (name, reason) in &created {
        let lines: Vec<&str> = logged
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, r)| r.as_str())
            .collect();
        assert_eq!(lines, [*reason], "the log lines of {name}");
    }
    drop(manager);
    eprintln!("refused by the apiserver itself: {refused_by_apiserver:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The value of `addon_manager_cache_entries{cache="<cache>"}` on the manager's /metrics.
async fn cache_entries(port: u16, cache: &str) -> Option<i64> {
    let text = testenv::http::get(([127, 0, 0, 1], port).into(), "/metrics")
        .await
        .ok()?
        .1;
    let series = format!("addon_manager_cache_entries{{cache=\"{cache}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(series.as_str()))
        .and_then(|v| v.trim().parse().ok())
}

/// The manager's memory does not grow with CSR churn: CSRs come and go by the thousand (each
/// refused after its request is parsed, so each is parsed, cached and reported); once they are
/// deleted, the manager's per-CSR memory (`csr_requests`, `csr_refusals`) is back where it
/// started. 1,000 CSRs: each is created as the cluster's registration agent and gets an event,
/// which is what takes the time on two cores.
#[tokio::test]
async fn deleted_csrs_leave_nothing_behind() {
    const CHURN: usize = 1_000;
    let addon = "csr-churn";
    let cp = testenv::shared().await;
    let admin = cp.client().expect("client");
    let system = testenv::namespace(&admin, "csr-churn-manager")
        .await
        .expect("namespace");
    let (dir, kubeconfig) = common::as_the_manager(cp, &admin, addon, &system).await;

    let cluster = common::accepted_cluster(&admin, "csr-churn").await;
    let mca: ManagedClusterAddOn = serde_json::from_value(json!({
        "apiVersion": "addon.open-cluster-management.io/v1alpha1",
        "kind": "ManagedClusterAddOn",
        "metadata": {"name": addon, "namespace": cluster},
        "spec": {}
    }))
    .expect("an mca");
    Api::<ManagedClusterAddOn>::namespaced(admin.clone(), &cluster)
        .create(&PostParams::default(), &mca)
        .await
        .expect("create mca");
    let agent = registration_agent(&cluster);
    common::allow_csr_create(&admin, &format!("{cluster}-csr-churn"), "User", &agent.0).await;

    let port = testenv::free_port();
    let _manager = Command::new(env!("CARGO_BIN_EXE_resource-usage-hub"))
        .args([
            "manager",
            "--addon-name",
            addon,
            "--agent-image",
            "example.com/agent:test",
            "--leader-elect=false",
            "--event-debounce=50ms",
        ])
        .arg(format!("--metrics-bind-address=127.0.0.1:{port}"))
        .env("KUBECONFIG", &kubeconfig)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map(Process)
        .expect("manager binary");
    let start = eventually("the manager's cache gauges", DEADLINE, || async {
        Some((
            cache_entries(port, "csr_requests").await?,
            cache_entries(port, "csr_refusals").await?,
        ))
    })
    .await;

    // Well-formed requests from the cluster's own agent, for a name that is not the agent's:
    // parsed, then refused (WrongCommonName).
    let groups: Vec<&str> = agent.1.iter().map(String::as_str).collect();
    let as_agent = cp.client_as(&agent.0, &groups).expect("agent client");
    let csrs = Api::<CertificateSigningRequest>::all(as_agent);
    let request = pem(&request_der(
        "system:open-cluster-management:cluster:other:addon:csr-churn:agent:x",
        &default_groups(&cluster, addon)
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
    ));
    let names: Vec<String> = (0..CHURN).map(|i| format!("{cluster}-churn-{i}")).collect();
    let started = std::time::Instant::now();
    futures::stream::iter(names.iter().map(|name| {
        let csr: CertificateSigningRequest = serde_json::from_value(json!({
            "apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
            "metadata": {"name": name, "labels": {
                "open-cluster-management.io/cluster-name": cluster,
                "open-cluster-management.io/addon-name": addon}},
            "spec": {"request": k8s_openapi::ByteString(request.clone().into_bytes()),
                     "signerName": SIGNER, "usages": AGENT_USAGES}
        }))
        .expect("a csr");
        let csrs = csrs.clone();
        async move {
            csrs.create(&PostParams::default(), &csr)
                .await
                .expect("create csr")
        }
    }))
    .buffer_unordered(16)
    .collect::<Vec<_>>()
    .await;
    let peak = eventually("every CSR parsed and refused once", DEADLINE, || async {
        let requests = cache_entries(port, "csr_requests").await?;
        let refusals = cache_entries(port, "csr_refusals").await?;
        (requests >= start.0 + CHURN as i64 && refusals >= start.1 + CHURN as i64)
            .then_some((requests, refusals))
    })
    .await;
    let admin_csrs = Api::<CertificateSigningRequest>::all(admin.clone());
    futures::stream::iter(names.iter().map(|name| {
        let api = admin_csrs.clone();
        async move {
            api.delete(name, &Default::default())
                .await
                .expect("delete csr")
        }
    }))
    .buffer_unordered(16)
    .collect::<Vec<_>>()
    .await;
    let end = eventually("the CSR caches back to their start", DEADLINE, || async {
        let now = (
            cache_entries(port, "csr_requests").await?,
            cache_entries(port, "csr_refusals").await?,
        );
        (now == start).then_some(now)
    })
    .await;
    eprintln!(
        "csr churn: {CHURN} CSRs created and deleted in {:?}; cache entries (requests, refusals): start {start:?}, peak {peak:?}, end {end:?}",
        started.elapsed()
    );
    let _ = std::fs::remove_dir_all(&dir);
}
