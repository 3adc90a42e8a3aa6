//! Registration of the add-on agent (addon-framework `registration` and `certificate`
//! controllers): the default subject, `status.registrations`, the agent's hub permission in
//! its cluster namespace, and which CertificateSigningRequests are this add-on's to approve.

use std::collections::BTreeSet;

use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::rbac::v1::{RoleBinding, RoleRef, Subject as RbacSubject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use ocm_api::addon::v1alpha1::{RegistrationConfig, Subject};
use ocm_api::wellknown::label;
use thiserror::Error;

/// The signer of hub client certificates (OCM's `kubeClient` registration).
pub const KUBE_CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client";

/// addon-framework `agent.DefaultUser`.
pub fn default_user(cluster: &str, addon: &str, agent: &str) -> String {
    format!("system:open-cluster-management:cluster:{cluster}:addon:{addon}:agent:{agent}")
}

/// addon-framework `agent.DefaultGroups`: the cluster's add-on group, then the add-on's.
pub fn default_groups(cluster: &str, addon: &str) -> [String; 2] {
    [
        format!("system:open-cluster-management:cluster:{cluster}:addon:{addon}"),
        format!("system:open-cluster-management:addon:{addon}"),
    ]
}

/// The group the klusterlet's registration agent of `cluster` is in on the hub: only it may
/// ask for its add-ons' certificates.
pub fn cluster_group(cluster: &str) -> String {
    format!("system:open-cluster-management:{cluster}")
}

/// `status.registrations` of the add-on on `cluster` (v1alpha1 shape: signer + subject).
pub fn registrations(cluster: &str, addon: &str, agent: &str) -> Vec<RegistrationConfig> {
    vec![RegistrationConfig {
        signer_name: KUBE_CLIENT_SIGNER.to_owned(),
        subject: Subject {
            user: default_user(cluster, addon, agent),
            groups: default_groups(cluster, addon).to_vec(),
            organization_units: Vec::new(),
        },
    }]
}

/// The name of the agent's hub RoleBinding in each cluster namespace (and of the Role earlier
/// versions made there).
pub fn permission_name(addon: &str) -> String {
    format!("open-cluster-management:{addon}:agent")
}

/// The agent's hub ClusterRole (`charts/ocm-placement/files/agent-hub-rbac.yaml`, installed
/// with the manager). The manager only binds it (RBAC `bind` on this name) and holds none of
/// its permissions. Not `permission_name`: on a hub that manages itself, the agent's own
/// ClusterRole on the managed side (`addon-manifests/agent/clusterrole.yaml`) has that name.
pub fn agent_cluster_role(addon: &str) -> String {
    format!("open-cluster-management:{addon}:agent-hub")
}

/// The hub ServiceAccount of `cluster`'s agent with the token driver: OCM's
/// token-infrastructure controller creates `<cluster>-<addon>-agent` in the cluster namespace,
/// and the agent's registration driver reports it as its subject.
pub fn token_service_account(cluster: &str, addon: &str) -> String {
    format!("{cluster}-{addon}-agent")
}

/// Why the subject a spoke wrote into `status.registrations` is not bound (it is not the
/// identity that cluster's agent has).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum PermissionError {
    #[error(
        "the token driver's subject user {} is not this cluster's agent service account {want}",
        shown(.got)
    )]
    TokenUser { got: String, want: String },
    #[error(
        "the token driver's subject names groups or organization units ({}); it may name only its user",
        shown(.0)
    )]
    TokenGroups(String),
}

/// A spoke-written string for a message: quoted and escaped (a newline stays `\n`), at most
/// 100 characters of it.
fn shown(s: &str) -> String {
    let cut: String = s.chars().take(100).collect();
    if cut.len() < s.len() {
        format!("{cut:?}...")
    } else {
        format!("{cut:?}")
    }
}

/// The agent's hub permission in its cluster namespace: a RoleBinding of the agent
/// ClusterRole to the identity `cluster`'s agent really has, labelled with the add-on name
/// (what the manager watches) and owned by the ManagedClusterAddOn.
///
/// `token_subject`: the subject the spoke reported with the token driver (None: the
/// certificate driver, whose subject the manager sets itself). It is taken only when it is
/// exactly that cluster's agent service account; the binding is built from our own names,
/// never from the spoke's text.
pub fn hub_permission(
    cluster: &str,
    addon: &str,
    agent: &str,
    token_subject: Option<&Subject>,
    owner: OwnerReference,
) -> Result<RoleBinding, PermissionError> {
    let subjects = match token_subject {
        None => vec![
            RbacSubject {
                api_group: Some("rbac.authorization.k8s.io".to_owned()),
                kind: "User".to_owned(),
                name: default_user(cluster, addon, agent),
                namespace: None,
            },
            // Only the per-cluster group: the add-on-wide one is every cluster's agent's.
            RbacSubject {
                api_group: Some("rbac.authorization.k8s.io".to_owned()),
                kind: "Group".to_owned(),
                name: default_groups(cluster, addon)[0].clone(),
                namespace: None,
            },
        ],
        Some(s) => {
            let sa = token_service_account(cluster, addon);
            let want = format!("system:serviceaccount:{cluster}:{sa}");
            if s.user != want {
                return Err(PermissionError::TokenUser {
                    got: s.user.clone(),
                    want,
                });
            }
            if !s.groups.is_empty() || !s.organization_units.is_empty() {
                let mut all = s.groups.clone();
                all.extend(s.organization_units.iter().cloned());
                return Err(PermissionError::TokenGroups(all.join(",")));
            }
            vec![RbacSubject {
                api_group: None,
                kind: "ServiceAccount".to_owned(),
                name: sa,
                namespace: Some(cluster.to_owned()),
            }]
        }
    };
    Ok(RoleBinding {
        metadata: ObjectMeta {
            name: Some(permission_name(addon)),
            namespace: Some(cluster.to_owned()),
            labels: Some([(label::ADDON_NAME.to_owned(), addon.to_owned())].into()),
            owner_references: Some(vec![owner]),
            ..ObjectMeta::default()
        },
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".to_owned(),
            kind: "ClusterRole".to_owned(),
            name: agent_cluster_role(addon),
        },
        subjects: Some(subjects),
    })
}

/// Whether the observed RoleBinding binds exactly what `desired` does.
pub fn binding_matches(observed: &RoleBinding, desired: &RoleBinding) -> bool {
    observed.role_ref == desired.role_ref
        && observed.subjects == desired.subjects
        && owned_meta_matches(&observed.metadata, &desired.metadata)
}

fn owned_meta_matches(observed: &ObjectMeta, desired: &ObjectMeta) -> bool {
    let labels_ok = desired.labels.iter().flatten().all(|(k, v)| {
        observed
            .labels
            .as_ref()
            .and_then(|l| l.get(k))
            .is_some_and(|o| o == v)
    });
    labels_ok && owners_include(observed, desired)
}

/// Every owner of `desired` is among `observed`'s (by uid; others may add theirs).
pub fn owners_include(observed: &ObjectMeta, desired: &ObjectMeta) -> bool {
    desired.owner_references.iter().flatten().all(|d| {
        observed
            .owner_references
            .iter()
            .flatten()
            .any(|o| o.uid == d.uid && o.controller == d.controller)
    })
}

/// Why a CSR of this add-on is not approved (each is logged and reported as an event once).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum CsrRefusal {
    #[error("already approved or denied")]
    Decided,
    #[error("not labelled for this add-on")]
    Labels,
    #[error("signer {0} is not {KUBE_CLIENT_SIGNER}")]
    Signer(String),
    #[error("cluster {0} has no ManagedClusterAddOn of this add-on")]
    NoAddOn(String),
    #[error("requested by {0}, not by cluster {1}'s registration agent")]
    Requester(String, String),
    #[error("usages {0:?} are not client auth (with digital signature, key encipherment)")]
    Usages(Vec<String>),
    #[error(
        "expirationSeconds {0} is outside [{min}, {max}]",
        min = super::csr::MIN_EXPIRATION_SECONDS,
        max = super::csr::MAX_EXPIRATION_SECONDS
    )]
    Expiration(i32),
    #[error(transparent)]
    Request(#[from] super::csr::RequestError),
    #[error("common name {0:?} is not the add-on agent's user")]
    CommonName(String),
    #[error("organizations {0:?} are not exactly the add-on agent's groups")]
    Groups(Vec<String>),
}

impl CsrRefusal {
    /// The event reason.
    pub fn reason(&self) -> &'static str {
        match self {
            CsrRefusal::Decided => "AlreadyDecided",
            CsrRefusal::Labels => "MissingLabels",
            CsrRefusal::Signer(_) => "WrongSigner",
            CsrRefusal::NoAddOn(_) => "ClusterWithoutAddOn",
            CsrRefusal::Requester(..) => "NotTheClusterAgent",
            CsrRefusal::Usages(_) => "WrongUsages",
            CsrRefusal::Expiration(_) => "WrongExpiration",
            CsrRefusal::Request(_) => "MalformedRequest",
            CsrRefusal::CommonName(_) => "WrongCommonName",
            CsrRefusal::Groups(_) => "WrongOrganizations",
        }
    }
}

/// Whether `csr` is this add-on's agent certificate request for a cluster that has the
/// add-on, asked by that cluster's registration agent, with exactly the default subject:
/// common name = the default user, organizations = the two default groups, signer
/// `kubernetes.io/kube-apiserver-client`, usages client auth (plus digital signature and key
/// encipherment), a sane `expirationSeconds`, labels cluster-name and addon-name, and a
/// request that every reader parses alike (see [`super::csr`]). Stricter than
/// addon-framework's `DefaultCSRApprover`, which also takes a third organization and only a
/// prefix of the requester's name: here cluster A's agent cannot obtain cluster B's add-on
/// identity, nor any identity other than the one the request shows.
pub fn check_csr(
    csr: &CertificateSigningRequest,
    addon: &str,
    agent: &str,
    has_addon: impl Fn(&str) -> bool,
) -> Result<(), CsrRefusal> {
    check_csr_with(
        csr,
        addon,
        agent,
        has_addon,
        &mut super::csr::Requests::default(),
    )
}

/// [`check_csr`], with the request parsed through `requests` (kept between passes).
pub fn check_csr_with(
    csr: &CertificateSigningRequest,
    addon: &str,
    agent: &str,
    has_addon: impl Fn(&str) -> bool,
    requests: &mut super::csr::Requests,
) -> Result<(), CsrRefusal> {
    let decided = csr
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c.type_ == "Approved" || c.type_ == "Denied" || c.type_ == "Failed")
        });
    if decided {
        return Err(CsrRefusal::Decided);
    }
    let labels = csr.metadata.labels.as_ref();
    let get = |k: &str| labels.and_then(|l| l.get(k)).map(String::as_str);
    let (Some(cluster), Some(a)) = (get(label::CLUSTER_NAME), get(label::ADDON_NAME)) else {
        return Err(CsrRefusal::Labels);
    };
    if a != addon || cluster.is_empty() {
        return Err(CsrRefusal::Labels);
    }
    let spec = &csr.spec;
    if spec.signer_name != KUBE_CLIENT_SIGNER {
        return Err(CsrRefusal::Signer(spec.signer_name.clone()));
    }
    if !has_addon(cluster) {
        return Err(CsrRefusal::NoAddOn(cluster.to_owned()));
    }
    let groups = spec.groups.as_deref().unwrap_or_default();
    if !super::csr::requester_is_cluster_agent(spec.username.as_deref(), groups, cluster) {
        return Err(CsrRefusal::Requester(
            spec.username.clone().unwrap_or_default(),
            cluster.to_owned(),
        ));
    }
    let usages = spec.usages.as_deref().unwrap_or_default();
    if !super::csr::usages_ok(usages) {
        return Err(CsrRefusal::Usages(usages.to_vec()));
    }
    if !super::csr::expiration_ok(spec.expiration_seconds) {
        return Err(CsrRefusal::Expiration(
            spec.expiration_seconds.unwrap_or_default(),
        ));
    }
    let subject = requests.parse(csr)?;
    if subject.common_name != default_user(cluster, addon, agent) {
        return Err(CsrRefusal::CommonName(subject.common_name));
    }
    let orgs = subject.organizations;
    let want: BTreeSet<String> = default_groups(cluster, addon).into_iter().collect();
    let got: BTreeSet<String> = orgs.iter().cloned().collect();
    if got != want || orgs.len() != want.len() {
        return Err(CsrRefusal::Groups(orgs));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
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
}
