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

pub mod csr;
#[cfg(test)]
mod tests;

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
pub(crate) fn shown(s: &str) -> String {
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
        min = csr::MIN_EXPIRATION_SECONDS,
        max = csr::MAX_EXPIRATION_SECONDS
    )]
    Expiration(i32),
    #[error(transparent)]
    Request(#[from] csr::RequestError),
    #[error("common name {0:?} is not the add-on agent's user")]
    CommonName(String),
    #[error("organizations {0:?} are not exactly the add-on agent's groups")]
    Groups(Vec<String>),
    #[error(
        "subject alternative names {0:?}: a client certificate of the add-on agent names none but {1}"
    )]
    SubjectAltNames(Vec<String>, String),
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
            CsrRefusal::SubjectAltNames(..) => "WrongSubjectAltNames",
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
    check_csr_with(csr, addon, agent, has_addon, &mut csr::Requests::default())
}

/// [`check_csr`], with the request parsed through `requests` (kept between passes).
pub fn check_csr_with(
    csr: &CertificateSigningRequest,
    addon: &str,
    agent: &str,
    has_addon: impl Fn(&str) -> bool,
    requests: &mut csr::Requests,
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
    if !csr::requester_is_cluster_agent(spec.username.as_deref(), groups, cluster) {
        return Err(CsrRefusal::Requester(
            spec.username.clone().unwrap_or_default(),
            cluster.to_owned(),
        ));
    }
    let usages = spec.usages.as_deref().unwrap_or_default();
    if !csr::usages_ok(usages) {
        return Err(CsrRefusal::Usages(usages.to_vec()));
    }
    if !csr::expiration_ok(spec.expiration_seconds) {
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
    let allowed = agent_dns_name(addon);
    if subject.dns_names.iter().any(|n| *n != allowed) {
        return Err(CsrRefusal::SubjectAltNames(subject.dns_names, allowed));
    }
    Ok(())
}

/// The one subject alternative name an add-on agent's request may carry: what upstream's
/// registration agent puts in every add-on CSR (ocm `pkg/registration/register/csr/csr.go`).
/// The certificate is for client auth only, so no other name (a wildcard service name,
/// `kubernetes.default.svc`, `localhost`, an IP) has a use but to be misused.
pub fn agent_dns_name(addon: &str) -> String {
    format!("{addon}.addon.open-cluster-management.io")
}
