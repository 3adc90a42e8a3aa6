use super::*;
use k8s_openapi::ByteString;
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequestCondition, CertificateSigningRequestSpec,
    CertificateSigningRequestStatus,
};

const ADDON: &str = "resource-usage-collect";
const AGENT: &str = "resource-usage-collect-agent";

fn request(cn: &str, orgs: &[&str]) -> Vec<u8> {
    let (pem, _key) = testenv::certificate_request(cn, orgs).expect("a request");
    pem.into_bytes()
}

fn csr(cluster: &str, cn: &str, orgs: &[&str]) -> CertificateSigningRequest {
    let mut c = CertificateSigningRequest::default();
    c.metadata.name = Some("addon-csr".into());
    c.metadata.labels = Some(
        [
            (label::CLUSTER_NAME.to_owned(), cluster.to_owned()),
            (label::ADDON_NAME.to_owned(), ADDON.to_owned()),
        ]
        .into(),
    );
    c.spec = CertificateSigningRequestSpec {
        request: ByteString(request(cn, orgs)),
        signer_name: KUBE_CLIENT_SIGNER.into(),
        username: Some(format!("system:open-cluster-management:{cluster}:agent1")),
        groups: Some(vec![
            cluster_group(cluster),
            "system:open-cluster-management:managed-clusters".into(),
        ]),
        usages: Some(vec!["digital signature".into(), "client auth".into()]),
        ..Default::default()
    };
    c
}

fn good(cluster: &str) -> CertificateSigningRequest {
    let g = default_groups(cluster, ADDON);
    csr(
        cluster,
        &default_user(cluster, ADDON, AGENT),
        &[&g[0], &g[1]],
    )
}

fn check(c: &CertificateSigningRequest) -> Result<(), CsrRefusal> {
    check_csr(c, ADDON, AGENT, |cl| cl == "c1" || cl == "c2")
}

#[test]
fn default_subject_is_upstreams() {
    assert_eq!(
        default_user("c1", "a", "a-agent"),
        "system:open-cluster-management:cluster:c1:addon:a:agent:a-agent"
    );
    assert_eq!(
        default_groups("c1", "a"),
        [
            "system:open-cluster-management:cluster:c1:addon:a".to_owned(),
            "system:open-cluster-management:addon:a".to_owned()
        ]
    );
    let r = registrations("c1", "a", "a-agent");
    assert_eq!(r[0].signer_name, KUBE_CLIENT_SIGNER);
    assert_eq!(r[0].subject.groups.len(), 2);
}

#[test]
fn csr_approval_takes_exactly_the_default_subject() {
    let g = default_groups("c1", ADDON);
    let user = default_user("c1", ADDON, AGENT);
    let other_user = default_user("c2", ADDON, AGENT);
    let mut wrong_signer = good("c1");
    wrong_signer.spec.signer_name = "example.com/signer".into();
    let mut approved = good("c1");
    approved.status = Some(CertificateSigningRequestStatus {
        conditions: Some(vec![CertificateSigningRequestCondition {
            type_: "Approved".into(),
            status: "True".into(),
            ..Default::default()
        }]),
        ..Default::default()
    });
    let mut other_addon = good("c1");
    other_addon
        .metadata
        .labels
        .as_mut()
        .map(|l| l.insert(label::ADDON_NAME.into(), "other".into()));
    let mut no_labels = good("c1");
    no_labels.metadata.labels = None;
    let mut other_requester = good("c1");
    other_requester.spec.groups = Some(vec![cluster_group("c2")]);
    let mut garbage = good("c1");
    garbage.spec.request = ByteString(b"not a csr".to_vec());
    let mut other_user_in_group = good("c1");
    other_user_in_group.spec.username = Some("someone".into());
    let mut server_auth = good("c1");
    server_auth.spec.usages = Some(vec!["client auth".into(), "server auth".into()]);
    let mut no_usages = good("c1");
    no_usages.spec.usages = None;
    let mut long_lived = good("c1");
    long_lived.spec.expiration_seconds = Some(10 * 365 * 24 * 3600);
    let mut one_day = good("c1");
    one_day.spec.expiration_seconds = Some(24 * 3600);
    let cases: Vec<(&str, CertificateSigningRequest, Result<(), CsrRefusal>)> = vec![
        ("the default subject", good("c1"), Ok(())),
        (
            "org order does not matter",
            csr("c1", &user, &[&g[1], &g[0]]),
            Ok(()),
        ),
        (
            "an extra group",
            csr("c1", &user, &[&g[0], &g[1], "system:masters"]),
            Err(CsrRefusal::Groups(vec![
                g[0].clone(),
                g[1].clone(),
                "system:masters".into(),
            ])),
        ),
        (
            "a missing group",
            csr("c1", &user, &[&g[0]]),
            Err(CsrRefusal::Groups(vec![g[0].clone()])),
        ),
        (
            "a repeated group",
            csr("c1", &user, &[&g[0], &g[1], &g[1]]),
            Err(CsrRefusal::Groups(vec![
                g[0].clone(),
                g[1].clone(),
                g[1].clone(),
            ])),
        ),
        (
            "another cluster's user",
            csr("c1", &other_user, &[&g[0], &g[1]]),
            Err(CsrRefusal::CommonName(other_user.clone())),
        ),
        (
            "a cluster without the add-on",
            good("c3"),
            Err(CsrRefusal::NoAddOn("c3".into())),
        ),
        (
            "another signer",
            wrong_signer,
            Err(CsrRefusal::Signer("example.com/signer".into())),
        ),
        ("already approved", approved, Err(CsrRefusal::Decided)),
        (
            "a user of the cluster's group that is not its agent",
            other_user_in_group,
            Err(CsrRefusal::Requester("someone".into(), "c1".into())),
        ),
        (
            "server auth",
            server_auth,
            Err(CsrRefusal::Usages(vec![
                "client auth".into(),
                "server auth".into(),
            ])),
        ),
        ("no usages", no_usages, Err(CsrRefusal::Usages(vec![]))),
        (
            "ten years",
            long_lived,
            Err(CsrRefusal::Expiration(10 * 365 * 24 * 3600)),
        ),
        ("a day", one_day, Ok(())),
        ("another add-on", other_addon, Err(CsrRefusal::Labels)),
        ("no labels", no_labels, Err(CsrRefusal::Labels)),
        (
            "asked by another cluster",
            other_requester,
            Err(CsrRefusal::Requester(
                "system:open-cluster-management:c1:agent1".into(),
                "c1".into(),
            )),
        ),
    ];
    for (name, c, want) in cases {
        assert_eq!(check(&c), want, "{name}");
    }
    assert!(matches!(check(&garbage), Err(CsrRefusal::Request(_))));
}

fn owner() -> OwnerReference {
    OwnerReference {
        api_version: "addon.open-cluster-management.io/v1alpha1".into(),
        kind: "ManagedClusterAddOn".into(),
        name: ADDON.into(),
        uid: "u1".into(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

fn subjects(b: &RoleBinding) -> Vec<(String, String, Option<String>)> {
    b.subjects
        .iter()
        .flatten()
        .map(|s| (s.kind.clone(), s.name.clone(), s.namespace.clone()))
        .collect()
}

#[test]
fn hub_permission_binds_the_agent_role_to_the_clusters_own_agent() {
    let binding = hub_permission("c1", ADDON, AGENT, None, owner()).expect("the default");
    assert_eq!(binding.metadata.namespace.as_deref(), Some("c1"));
    assert_eq!(
        (
            binding.role_ref.kind.as_str(),
            binding.role_ref.name.as_str()
        ),
        (
            "ClusterRole",
            "open-cluster-management:resource-usage-collect:agent-hub"
        )
    );
    assert_eq!(
        subjects(&binding),
        [
            ("User".into(), default_user("c1", ADDON, AGENT), None),
            ("Group".into(), default_groups("c1", ADDON)[0].clone(), None)
        ]
    );
    assert!(binding_matches(&binding, &binding));
    let mut other_role = binding.clone();
    other_role.role_ref.kind = "Role".into();
    assert!(!binding_matches(&other_role, &binding));

    // The token driver: exactly the cluster's agent service account, as a ServiceAccount.
    let token = |user: &str, groups: &[&str]| Subject {
        user: user.into(),
        groups: groups.iter().map(|g| (*g).to_owned()).collect(),
        organization_units: Vec::new(),
    };
    let own = "system:serviceaccount:c1:c1-resource-usage-collect-agent";
    let binding = hub_permission("c1", ADDON, AGENT, Some(&token(own, &[])), owner())
        .expect("the agent's own service account");
    assert_eq!(
        subjects(&binding),
        [(
            "ServiceAccount".into(),
            "c1-resource-usage-collect-agent".into(),
            Some("c1".into())
        )]
    );
}

#[test]
fn a_spoke_written_subject_other_than_its_agent_is_refused() {
    let own = "system:serviceaccount:c1:c1-resource-usage-collect-agent";
    let want = || own.to_owned();
    let user_err = |got: &str| {
        Err(PermissionError::TokenUser {
            got: got.into(),
            want: want(),
        })
    };
    let trailing = format!("{own} ");
    let yaml = format!(
        "{own}\n- apiGroup: rbac.authorization.k8s.io\n  kind: Group\n  name: system:authenticated"
    );
    // (what, user, groups, the result)
    type Case<'a> = (&'a str, &'a str, Vec<&'a str>, Result<(), PermissionError>);
    let cases: Vec<Case<'_>> = vec![
        ("a newline and YAML", yaml.as_str(), vec![], user_err(&yaml)),
        (
            "another cluster's agent",
            "system:serviceaccount:c2:c2-resource-usage-collect-agent",
            vec![],
            user_err("system:serviceaccount:c2:c2-resource-usage-collect-agent"),
        ),
        (
            "another cluster's certificate user",
            "system:open-cluster-management:cluster:c2:addon:resource-usage-collect:agent:resource-usage-collect-agent",
            vec![],
            user_err(
                "system:open-cluster-management:cluster:c2:addon:resource-usage-collect:agent:resource-usage-collect-agent",
            ),
        ),
        (
            "another service account in the cluster namespace",
            "system:serviceaccount:c1:default",
            vec![],
            user_err("system:serviceaccount:c1:default"),
        ),
        (
            "a group-like user",
            "system:authenticated",
            vec![],
            user_err("system:authenticated"),
        ),
        (
            "trailing space",
            trailing.as_str(),
            vec![],
            user_err(&trailing),
        ),
        (
            "the right user with a wildcard group",
            own,
            vec!["system:authenticated"],
            Err(PermissionError::TokenGroups("system:authenticated".into())),
        ),
        (
            "the right user with a service-accounts group",
            own,
            vec!["system:serviceaccounts"],
            Err(PermissionError::TokenGroups(
                "system:serviceaccounts".into(),
            )),
        ),
    ];
    for (name, user, groups, want) in cases {
        let s = Subject {
            user: user.into(),
            groups: groups.into_iter().map(str::to_owned).collect(),
            organization_units: Vec::new(),
        };
        let got = hub_permission("c1", ADDON, AGENT, Some(&s), owner()).map(drop);
        assert_eq!(got, want, "{name}");
    }
    let mut ou = Subject {
        user: own.into(),
        ..Subject::default()
    };
    ou.organization_units = vec!["x".into()];
    assert!(hub_permission("c1", ADDON, AGENT, Some(&ou), owner()).is_err());

    // The message escapes and shortens what the spoke wrote.
    let long = format!("{}\nkind: Group", "a".repeat(300));
    let msg = hub_permission(
        "c1",
        ADDON,
        AGENT,
        Some(&Subject {
            user: long,
            ..Subject::default()
        }),
        owner(),
    )
    .expect_err("refused")
    .to_string();
    assert!(!msg.contains('\n'), "{msg}");
    assert!(msg.len() < 300, "{msg}");
}
