//! The agent binary follows its hub credentials as OCM rotates them: the hub kubeconfig names
//! client-certificate files by relative paths (as the mounted `<addon>-hub-kubeconfig` secret
//! does), the files are replaced under the running agent, and it goes on writing with the new
//! identity without a restart; files caught mid-rotation do not break it. The shared control
//! plane is both hub and managed cluster.

mod common;

use std::path::Path;
use std::time::Duration;

use common::*;
use k8s_openapi::api::authorization::v1::SubjectAccessReview;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::Client;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;
use testenv::{ClientCertificate, ControlPlane};

/// The agent's score object (the binary's default `--score-name`).
const SCORE: &str = "resource-usage-score";
const RELOADS: &str = "score_provider_hub_client_reloads_total";
const CERT_VALIDITY: Duration = Duration::from_secs(3600);

/// The identity the rotation moves to: another user, without the group the shipped
/// RoleBinding names, so that only this test's own binding lets it write.
fn identity_b(setup: &Setup) -> (String, String) {
    let (user_a, _) = setup.hub_identity();
    (
        format!("{user_a}-rotated"),
        format!("test:{}:rotated-agents", setup.cluster),
    )
}

fn certificate(cp: &ControlPlane, user: &str, groups: &[String]) -> ClientCertificate {
    let groups: Vec<&str> = groups.iter().map(String::as_str).collect();
    cp.client_certificate(user, &groups, CERT_VALIDITY)
        .expect("a client certificate")
}

/// A node for the agent to score, and the agent running with the certificate kubeconfig
/// `kubeconfig` as its hub kubeconfig; returns once the hub shows its scores.
async fn start_agent(
    cp: &ControlPlane,
    setup: &Setup,
    kubeconfig: &Path,
) -> (Agent, jiff::Timestamp) {
    let admin = cp.client().expect("admin");
    let n = node(
        setup,
        "n1",
        &[("cpu", "8"), ("memory", "32Gi"), ("pods", "110")],
        false,
    );
    create_node(&admin, &n).await;
    let port = free_port();
    let mut args = setup.run_args(port);
    let hub_arg = args
        .iter_mut()
        .find(|a| a.starts_with("--hub-kubeconfig="))
        .expect("run_args names the hub kubeconfig");
    *hub_arg = format!("--hub-kubeconfig={}", kubeconfig.display());
    let agent = Agent::spawn(&args, &setup.dir.join("agent.log"), port);
    let (admin, cluster) = (&admin, setup.cluster.as_str());
    let first = eventually("the first scores on the hub", DEADLINE, || async move {
        let s = score_status(admin, cluster, SCORE).await?;
        if s.scores.is_empty() {
            return None;
        }
        s.valid_until.map(|t| t.0)
    })
    .await;
    (agent, first)
}

async fn valid_until(client: &Client, cluster: &str) -> Option<jiff::Timestamp> {
    score_status(client, cluster, SCORE)
        .await?
        .valid_until
        .map(|t| t.0)
}

/// Waits until the hub shows a `validUntil` later than `after`: a write since then.
async fn written_after(client: &Client, cluster: &str, after: jiff::Timestamp, what: &str) {
    eventually(what, DEADLINE, || async move {
        let v = valid_until(client, cluster).await?;
        (v > after).then_some(())
    })
    .await;
}

/// A Role that lets its subjects write the cluster's scores, bound to `user` and `group`.
async fn grant(admin: &Client, ns: &str, user: &str, group: &str) {
    let role: Role = serde_json::from_value(json!({
        "metadata": { "name": "rotated-agent", "namespace": ns },
        "rules": [
            {
                "apiGroups": ["cluster.open-cluster-management.io"],
                "resources": ["addonplacementscores"],
                "verbs": ["get", "list", "watch", "create", "update", "patch"],
            },
            {
                "apiGroups": ["cluster.open-cluster-management.io"],
                "resources": ["addonplacementscores/status"],
                "verbs": ["update", "patch"],
            },
        ],
    }))
    .expect("a role");
    Api::<Role>::namespaced(admin.clone(), ns)
        .create(&PostParams::default(), &role)
        .await
        .expect("create the role");
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": { "name": "rotated-agent", "namespace": ns },
        "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "rotated-agent" },
        "subjects": [
            { "apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user },
            { "apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": group },
        ],
    }))
    .expect("a role binding");
    Api::<RoleBinding>::namespaced(admin.clone(), ns)
        .create(&PostParams::default(), &binding)
        .await
        .expect("create the role binding");
}

/// Whether the apiserver lets `user` in `groups` patch the status of the cluster's scores.
async fn may_write(admin: &Client, ns: &str, user: &str, groups: &[String]) -> Option<bool> {
    let review: SubjectAccessReview = serde_json::from_value(json!({
        "spec": {
            "user": user,
            "groups": groups,
            "resourceAttributes": {
                "namespace": ns,
                "verb": "patch",
                "group": "cluster.open-cluster-management.io",
                "resource": "addonplacementscores",
                "subresource": "status",
                "name": SCORE,
            },
        },
    }))
    .expect("a review");
    let answer = Api::<SubjectAccessReview>::all(admin.clone())
        .create(&PostParams::default(), &review)
        .await
        .ok()?;
    Some(answer.status?.allowed)
}

/// Deletes the shipped RoleBinding that lets identity A write, and waits until the apiserver
/// refuses A; returns `validUntil` as it is then: a later one can only have been written by
/// another identity.
async fn revoke_a(admin: &Client, setup: &Setup) -> jiff::Timestamp {
    let ns = setup.cluster.as_str();
    let name = format!("open-cluster-management:{}:agent", setup.addon);
    Api::<RoleBinding>::namespaced(admin.clone(), ns)
        .delete(&name, &DeleteParams::default())
        .await
        .expect("delete identity A's role binding");
    let (user_a, groups_a) = setup.hub_identity();
    let (user_a, groups_a) = (user_a.as_str(), &groups_a);
    eventually("identity A to lose write access", DEADLINE, || async move {
        let allowed = may_write(admin, ns, user_a, groups_a).await?;
        (!allowed).then_some(())
    })
    .await;
    let (user_b, group_b) = identity_b(setup);
    assert_eq!(
        may_write(admin, ns, &user_b, &[group_b]).await,
        Some(true),
        "identity B may write"
    );
    valid_until(admin, ns)
        .await
        .expect("validUntil when A lost access")
}

/// Writes `contents` to `path` through a temporary file and a rename.
fn replace(path: &Path, contents: &str) {
    let tmp = path.with_extension("partial");
    std::fs::write(&tmp, contents).expect("write");
    std::fs::rename(&tmp, path).expect("rename");
}

/// How many times the agent said it could not load changed hub credentials.
fn load_failures(agent: &Agent) -> usize {
    agent
        .log_text()
        .matches("hub credentials changed but cannot be loaded yet")
        .count()
}

#[tokio::test]
async fn rotated_credentials_are_used_without_a_restart() {
    let cp = testenv::shared().await;
    let setup = Setup::new(cp, cp, "rotate").await;
    let admin = cp.client().expect("admin");
    let cluster = setup.cluster.as_str();
    let (user_a, groups_a) = setup.hub_identity();
    let secret_dir = setup.dir.join("hub-kubeconfig");
    let kubeconfig = cp
        .write_cert_kubeconfig(&secret_dir, &certificate(cp, &user_a, &groups_a))
        .expect("identity A's kubeconfig");

    let (mut agent, _) = start_agent(cp, &setup, &kubeconfig).await;
    let pid = agent.pid();
    assert_eq!(
        agent.metric(RELOADS).await,
        Some(0.0),
        "nothing rotated yet"
    );

    // OCM rotates the add-on's certificate: the new identity B may write, then the files in
    // the mounted secret are replaced.
    let (user_b, group_b) = identity_b(&setup);
    grant(&admin, cluster, &user_b, &group_b).await;
    cp.write_cert_kubeconfig(
        &secret_dir,
        &certificate(cp, &user_b, std::slice::from_ref(&group_b)),
    )
    .expect("identity B's kubeconfig");
    let a = &agent;
    eventually(
        "the agent to load the new credentials",
        DEADLINE,
        || async move { (a.metric(RELOADS).await? >= 1.0).then_some(()) },
    )
    .await;

    // A loses its access: from now on only B can renew the scores.
    let revoked = revoke_a(&admin, &setup).await;
    written_after(
        &admin,
        cluster,
        revoked,
        "the agent to renew the scores as identity B",
    )
    .await;
    let reloads = agent.metric(RELOADS).await.expect("the reload counter");
    assert!(reloads >= 1.0, "hub client reloads: {reloads}");
    assert!(agent.running(), "the agent exited");
    assert_eq!(agent.pid(), pid, "the agent was not restarted");
}

#[tokio::test]
async fn credentials_caught_mid_rotation_keep_the_old_client() {
    let cp = testenv::shared().await;
    let setup = Setup::new(cp, cp, "midrot").await;
    let admin = cp.client().expect("admin");
    let cluster = setup.cluster.as_str();
    let (user_a, groups_a) = setup.hub_identity();
    let secret_dir = setup.dir.join("hub-kubeconfig");
    let kubeconfig = cp
        .write_cert_kubeconfig(&secret_dir, &certificate(cp, &user_a, &groups_a))
        .expect("identity A's kubeconfig");

    let (mut agent, _) = start_agent(cp, &setup, &kubeconfig).await;
    let pid = agent.pid();
    let (user_b, group_b) = identity_b(&setup);
    grant(&admin, cluster, &user_b, &group_b).await;
    let cert_b = certificate(cp, &user_b, std::slice::from_ref(&group_b));

    // Caught mid-rotation: the new key is in place, the certificate only half written.
    replace(&secret_dir.join("tls.key"), &cert_b.key_pem);
    let half = &cert_b.cert_pem[..cert_b.cert_pem.len() / 2];
    replace(&secret_dir.join("tls.crt"), half);
    let failures = load_failures(&agent);
    let a = &agent;
    eventually(
        "the agent to notice the unusable credentials (twice)",
        DEADLINE,
        || async move { (load_failures(a) >= failures + 2).then_some(()) },
    )
    .await;
    // The old client goes on writing.
    let seen = valid_until(&admin, cluster).await.expect("validUntil");
    written_after(
        &admin,
        cluster,
        seen,
        "the agent to renew the scores with the old client",
    )
    .await;
    assert_eq!(
        agent.metric(RELOADS).await,
        Some(0.0),
        "no client was built from the broken files"
    );
    assert!(agent.running(), "the agent exited on broken credentials");

    // The rotation completes: the agent picks the good files up.
    cp.write_cert_kubeconfig(&secret_dir, &cert_b)
        .expect("identity B's kubeconfig");
    let a = &agent;
    eventually(
        "the agent to load the new credentials",
        DEADLINE,
        || async move { (a.metric(RELOADS).await? >= 1.0).then_some(()) },
    )
    .await;
    let revoked = revoke_a(&admin, &setup).await;
    written_after(
        &admin,
        cluster,
        revoked,
        "the agent to renew the scores as identity B",
    )
    .await;
    assert!(agent.running(), "the agent exited");
    assert_eq!(agent.pid(), pid, "the agent was not restarted");
}
