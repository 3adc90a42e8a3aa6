//! Real RBAC on the test control plane: an identity is refused until a Role and RoleBinding
//! allow it, and then only in that namespace.

#![allow(clippy::unwrap_used)] // in a test, a failed unwrap is a failed test

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use kube::api::{ListParams, ObjectMeta, PostParams};
use kube::{Api, Client};

fn is_forbidden(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(s) if s.code == 403)
}

async fn list_configmaps(client: &Client, ns: &str) -> Result<usize, kube::Error> {
    Api::<ConfigMap>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .map(|l| l.items.len())
}

#[tokio::test]
async fn identity_without_rbac_is_refused_then_allowed_only_where_bound() {
    let cp = testenv::shared().await;
    let admin = cp.client().unwrap();
    let allowed_ns = testenv::namespace(&admin, "rbac-allowed").await.unwrap();
    let other_ns = testenv::namespace(&admin, "rbac-other").await.unwrap();
    let alice = cp.client_as("alice", &["team-a"]).unwrap();

    // No RBAC yet: refused everywhere, reads and writes.
    let err = list_configmaps(&alice, &allowed_ns).await.unwrap_err();
    assert!(is_forbidden(&err), "expected 403, got {err:?}");
    let cm = ConfigMap {
        metadata: ObjectMeta {
            name: Some("probe".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    let err = Api::<ConfigMap>::namespaced(alice.clone(), &allowed_ns)
        .create(&PostParams::default(), &cm)
        .await
        .unwrap_err();
    assert!(is_forbidden(&err), "expected 403, got {err:?}");

    // A Role and a RoleBinding for her group in one namespace.
    let role = Role {
        metadata: ObjectMeta {
            name: Some("configmap-reader".into()),
            ..Default::default()
        },
        rules: Some(vec![PolicyRule {
            api_groups: Some(vec![String::new()]),
            resources: Some(vec!["configmaps".into()]),
            verbs: vec!["get".into(), "list".into()],
            ..Default::default()
        }]),
    };
    Api::<Role>::namespaced(admin.clone(), &allowed_ns)
        .create(&PostParams::default(), &role)
        .await
        .unwrap();
    let binding = RoleBinding {
        metadata: ObjectMeta {
            name: Some("team-a-reads".into()),
            ..Default::default()
        },
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".into(),
            kind: "Role".into(),
            name: "configmap-reader".into(),
        },
        subjects: Some(vec![Subject {
            kind: "Group".into(),
            name: "team-a".into(),
            api_group: Some("rbac.authorization.k8s.io".into()),
            ..Default::default()
        }]),
    };
    Api::<RoleBinding>::namespaced(admin.clone(), &allowed_ns)
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();

    // The authorizer sees new bindings through its informers: poll until it does.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match list_configmaps(&alice, &allowed_ns).await {
            Ok(_) => break,
            Err(e) if is_forbidden(&e) && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("alice still refused in {allowed_ns}: {e:?}"),
        }
    }

    // Still refused in the other namespace, and for verbs the Role does not grant.
    let err = list_configmaps(&alice, &other_ns).await.unwrap_err();
    assert!(
        is_forbidden(&err),
        "expected 403 in {other_ns}, got {err:?}"
    );
    let err = Api::<ConfigMap>::namespaced(alice.clone(), &allowed_ns)
        .create(&PostParams::default(), &cm)
        .await
        .unwrap_err();
    assert!(is_forbidden(&err), "expected 403 for create, got {err:?}");

    // Someone outside the group is still refused where alice is allowed.
    let bob = cp.client_as("bob", &["team-b"]).unwrap();
    let err = list_configmaps(&bob, &allowed_ns).await.unwrap_err();
    assert!(is_forbidden(&err), "expected 403 for bob, got {err:?}");
}

/// Processes under test get a kubeconfig file: it reaches the same apiserver over verified TLS,
/// as the admin or as the impersonated identity.
#[tokio::test]
async fn kubeconfig_files_carry_the_identity() {
    use kube::config::{KubeConfigOptions, Kubeconfig};
    let cp = testenv::shared().await;
    let dir = std::env::temp_dir().join(format!("testenv-kubeconfig-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();

    let admin_path = dir.join("admin.kubeconfig");
    cp.write_kubeconfig(&admin_path).unwrap();
    let kc = Kubeconfig::read_from(&admin_path).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .unwrap();
    assert!(!config.accept_invalid_certs);
    let admin = Client::try_from(config).unwrap();
    let ns = testenv::namespace(&admin, "kubeconfig").await.unwrap();
    list_configmaps(&admin, &ns).await.unwrap();

    let carol = Kubeconfig::from_yaml(&cp.kubeconfig(Some(("carol", &["team-c"])))).unwrap();
    let config = kube::Config::from_custom_kubeconfig(carol, &KubeConfigOptions::default())
        .await
        .unwrap();
    let err = list_configmaps(&Client::try_from(config).unwrap(), &ns)
        .await
        .unwrap_err();
    assert!(is_forbidden(&err), "expected 403 for carol, got {err:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}
