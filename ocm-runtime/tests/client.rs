//! The hub client against the real apiserver: the rate limit holds, a watch takes one token,
//! the user agent reaches the server, kubeconfig files are read or refused by name, and a
//! followed one is read again when rotated; the apiserver's answers are told apart.
#![allow(clippy::unwrap_used)]

use std::path::PathBuf;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{ListParams, PostParams, WatchEvent, WatchParams};
use ocm_runtime::client::{ClientArgs, RateLimiter, client, client_with};
use tokio::time::Instant;

fn config_map(name: &str) -> ConfigMap {
    ConfigMap {
        metadata: kube::api::ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        // A field to manage: an object without one gets no managedFields entry.
        data: Some([("k".to_string(), "v".to_string())].into()),
        ..Default::default()
    }
}

/// A scratch directory for this test, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Self {
        let dir =
            std::env::temp_dir().join(format!("ocm-runtime-client-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rate_limit_holds_against_the_apiserver() {
    let cp = testenv::shared().await;
    let ns = testenv::namespace(&cp.client().unwrap(), "ratelimit")
        .await
        .unwrap();
    let (qps, burst, n) = (20.0, 5u32, 45u64);
    let limiter = RateLimiter::new(qps, burst).unwrap();
    let client = client_with(cp.config(None).unwrap(), Some(&limiter), "ratelimit-test").unwrap();
    let api: Api<ConfigMap> = Api::namespaced(client, &ns);

    let lp = ListParams::default();
    let start = Instant::now();
    let results = futures::future::join_all((0..n).map(|_| api.list(&lp))).await;
    let elapsed = start.elapsed();

    assert!(results.iter().all(Result::is_ok), "every request succeeds");
    let stats = limiter.stats();
    assert_eq!(stats.permits, n, "every request went through the limiter");
    assert!(
        stats.delayed > 0,
        "requests beyond the burst waited: {stats:?}"
    );
    // The bucket holds at most `burst` tokens and refills at `qps`: n requests cannot all get
    // a token sooner than (n - burst) / qps after any starting point.
    let floor = Duration::from_secs_f64((n - u64::from(burst)) as f64 / qps);
    assert!(
        elapsed + Duration::from_millis(1) >= floor,
        "{n} requests took {elapsed:?}, less than the bucket allows ({floor:?})"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_takes_one_token_however_long_it_streams() {
    let cp = testenv::shared().await;
    let admin = cp.client().unwrap();
    let ns = testenv::namespace(&admin, "watchtoken").await.unwrap();
    // Two tokens and practically no refill: a third request would wait for over 15 minutes.
    let limiter = RateLimiter::new(0.001, 2).unwrap();
    let limited: Api<ConfigMap> = Api::namespaced(
        client_with(cp.config(None).unwrap(), Some(&limiter), "watch-test").unwrap(),
        &ns,
    );
    let rv = limited
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let mut events = limited
        .watch(&WatchParams::default(), &rv)
        .await
        .unwrap()
        .boxed();

    let writer: Api<ConfigMap> = Api::namespaced(admin, &ns);
    for i in 0..5 {
        writer
            .create(&PostParams::default(), &config_map(&format!("cm-{i}")))
            .await
            .unwrap();
    }
    let mut added = Vec::new();
    let deadline = Duration::from_secs(60);
    while added.len() < 5 {
        match tokio::time::timeout(deadline, events.try_next()).await {
            Ok(Ok(Some(WatchEvent::Added(cm)))) => added.push(cm.metadata.name.unwrap()),
            Ok(Ok(Some(_))) => {}
            other => panic!("the watch ended or stalled after {added:?}: {other:?}"),
        }
    }
    assert_eq!(added, ["cm-0", "cm-1", "cm-2", "cm-3", "cm-4"]);
    let stats = limiter.stats();
    assert_eq!((stats.permits, stats.delayed), (2, 0), "{stats:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_user_agent_names_the_field_manager() {
    let cp = testenv::shared().await;
    let ns = testenv::namespace(&cp.client().unwrap(), "useragent")
        .await
        .unwrap();
    let client = client_with(cp.config(None).unwrap(), None, "ocm-runtime-test/1.2.3").unwrap();
    let api: Api<ConfigMap> = Api::namespaced(client, &ns);
    let cm = api
        .create(&PostParams::default(), &config_map("ua"))
        .await
        .unwrap();
    let managers: Vec<String> = cm
        .metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .filter_map(|m| m.manager)
        .collect();
    // The apiserver names an unnamed field manager after the user agent up to the first `/`.
    assert_eq!(managers, ["ocm-runtime-test"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubeconfig_files_are_used_or_refused_by_name() {
    let cp = testenv::shared().await;
    let dir = Scratch::new("kubeconfig");
    let good = dir.0.join("good");
    cp.write_kubeconfig(&good).unwrap();
    let args = |kubeconfig: PathBuf| ClientArgs {
        kubeconfig: Some(kubeconfig),
        client_qps: 50.0,
        client_burst: 100,
    };

    let c = client(&args(good.clone()), "kubeconfig-test")
        .await
        .unwrap();
    let ns = testenv::namespace(&c, "kubeconfig").await.unwrap();
    assert!(ns.starts_with("kubeconfig"));

    // A list of files, as KUBECONFIG may hold, is merged (the first file's context wins).
    let other = dir.0.join("other");
    std::fs::write(
        &other,
        "apiVersion: v1\nkind: Config\nclusters:\n- name: elsewhere\n  cluster:\n    server: https://127.0.0.1:1\ncontexts:\n- name: elsewhere\n  context:\n    cluster: elsewhere\n    user: nobody\nusers:\n- name: nobody\n  user: {}\ncurrent-context: elsewhere\n",
    )
    .unwrap();
    let both = std::env::join_paths([&good, &other]).unwrap();
    let c = client(&args(both.into()), "kubeconfig-test").await.unwrap();
    c.apiserver_version().await.unwrap();

    let broken = dir.0.join("broken");
    std::fs::write(&broken, "clusters: [ this is not yaml").unwrap();
    for bad in [broken, dir.0.join("missing")] {
        let e = client(&args(bad.clone()), "kubeconfig-test")
            .await
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains(&format!("cannot read the kubeconfig {}", bad.display())),
            "{e}"
        );
    }
}

/// The predicates of `ocm_runtime::write` on the apiserver's own answers, and the
/// preconditions they report on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_errors_are_told_apart_and_preconditions_hold() {
    use kube::api::{Patch, PatchParams};
    use ocm_runtime::write::{
        delete_params, ignore_not_found, is_already_exists, is_conflict, is_not_found,
        is_unauthorized, preconditioned,
    };

    let cp = testenv::shared().await;
    let admin = cp.client().unwrap();
    let ns = testenv::namespace(&admin, "apierrors").await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(admin, &ns);
    let cm = api
        .create(&PostParams::default(), &config_map("cm"))
        .await
        .unwrap();
    let (rv, uid) = (
        cm.metadata.resource_version.clone().unwrap(),
        cm.metadata.uid.clone().unwrap(),
    );

    let taken = api
        .create(&PostParams::default(), &config_map("cm"))
        .await
        .unwrap_err();
    assert!(is_already_exists(&taken) && !is_conflict(&taken), "{taken}");
    let missing = api.get("missing").await.unwrap_err();
    assert!(is_not_found(&missing), "{missing}");

    // A patch preconditioned on the version read applies once; a second one computed from
    // the same read conflicts.
    let body = |v: &str| preconditioned(serde_json::json!({"data": {"k": v}}), Some(&rv));
    let pp = PatchParams::default();
    api.patch("cm", &pp, &Patch::Merge(&body("first")))
        .await
        .unwrap();
    let stale = api
        .patch("cm", &pp, &Patch::Merge(&body("second")))
        .await
        .unwrap_err();
    assert!(is_conflict(&stale) && !is_already_exists(&stale), "{stale}");
    assert_eq!(
        api.get("cm").await.unwrap().data.unwrap()["k"],
        "first",
        "the stale patch changed nothing"
    );

    // A delete of another object of the same name (re-created since) conflicts.
    let wrong = api
        .delete("cm", &delete_params(Some("another-uid"), None))
        .await
        .unwrap_err();
    assert!(is_conflict(&wrong), "{wrong}");
    assert!(
        ignore_not_found(api.delete("cm", &delete_params(Some(&uid), None)).await)
            .unwrap()
            .is_some()
    );
    assert!(
        ignore_not_found(api.delete("cm", &delete_params(Some(&uid), None)).await)
            .unwrap()
            .is_none(),
        "deleting what is gone is nothing to do"
    );

    // Credentials the apiserver does not accept.
    let mut config = cp.config(None).unwrap();
    config.auth_info = kube::config::AuthInfo {
        token: Some("not-a-token".to_owned().into()),
        ..kube::config::AuthInfo::default()
    };
    let stranger: Api<ConfigMap> = Api::namespaced(client_with(config, None, "t/0").unwrap(), &ns);
    let refused = stranger.get("cm").await.unwrap_err();
    assert!(is_unauthorized(&refused), "{refused}");
}

/// A kubeconfig whose client certificate is replaced in place: the followed client takes the
/// new identity without a restart, and keeps the old one while the files are half written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_followed_kubeconfig_takes_the_rotated_certificate() {
    use k8s_openapi::api::authentication::v1::SelfSubjectReview;
    use ocm_runtime::client::follow::{FollowError, KubeconfigClient};

    async fn who(client: kube::Client) -> String {
        let review = Api::<SelfSubjectReview>::all(client)
            .create(&PostParams::default(), &SelfSubjectReview::default())
            .await
            .unwrap();
        review
            .status
            .and_then(|s| s.user_info)
            .and_then(|u| u.username)
            .unwrap_or_default()
    }

    let cp = testenv::shared().await;
    let dir = Scratch::new("follow");
    let cert = |user| {
        cp.client_certificate(user, &[], Duration::from_secs(3600))
            .unwrap()
    };
    let path = cp.write_cert_kubeconfig(&dir.0, &cert("agent-a")).unwrap();
    let hub = KubeconfigClient::load(&path, "follow-test/0")
        .await
        .unwrap();
    assert!(hub.server().starts_with(cp.server()), "{}", hub.server());
    assert_eq!(who(hub.client()).await, "agent-a");
    assert!(!hub.reload_if_changed().await.unwrap());

    // Mid-rotation: the new certificate without its key yet.
    let b = cert("agent-b");
    std::fs::remove_file(dir.0.join("tls.key")).unwrap();
    std::fs::write(dir.0.join("tls.crt"), &b.cert_pem).unwrap();
    let e = hub.reload_if_changed().await.unwrap_err();
    assert!(matches!(e, FollowError::File { .. }), "{e}");
    assert_eq!(who(hub.client()).await, "agent-a", "the old client stays");

    cp.write_cert_kubeconfig(&dir.0, &b).unwrap();
    assert!(hub.reload_if_changed().await.unwrap());
    assert_eq!(hub.generation(), 1);
    assert_eq!(who(hub.client()).await, "agent-b");
}
