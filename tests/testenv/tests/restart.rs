//! Stopping and restarting kube-apiserver (a hub outage): data survives in etcd, clients and
//! kubeconfigs made before the outage work again after it.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{ObjectMeta, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client};
use testenv::process::is_running;
use testenv::{ControlPlane, Options};

/// Retries `get` until it succeeds; panics with the last error once `within` has passed.
async fn get_within(api: &Api<ConfigMap>, name: &str, within: Duration) -> ConfigMap {
    let deadline = Instant::now() + within;
    loop {
        match api.get(name).await {
            Ok(cm) => return cm,
            Err(_) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("{name} not readable within {within:?}: {e:?}"),
        }
    }
}

// Owns its control plane: stopping the shared one would break the other tests of the binary.
#[tokio::test]
async fn data_and_clients_survive_an_apiserver_restart() {
    let cp = ControlPlane::start(Options::default())
        .await
        .expect("the control plane starts");
    let client = cp.client().expect("an admin client");
    let configmaps = Api::<ConfigMap>::namespaced(client, "default");
    let cm = ConfigMap {
        metadata: ObjectMeta {
            name: Some("before-outage".into()),
            ..Default::default()
        },
        data: Some([("value".to_string(), "kept".to_string())].into()),
        ..Default::default()
    };
    configmaps
        .create(&PostParams::default(), &cm)
        .await
        .expect("the ConfigMap is created");

    // A certificate kubeconfig written before the outage embeds the serving CA: it only works
    // afterwards if the restarted apiserver reuses its serving certificate.
    let cert = cp
        .client_certificate("before-outage", &[], Duration::from_secs(3600))
        .expect("a client certificate");
    let kubeconfig = cp
        .write_cert_kubeconfig(&cp.dir().join("agent-hub-kubeconfig"), &cert)
        .expect("the kubeconfig is written");

    let [etcd_pid, old_pid] = cp.pids();
    cp.stop_apiserver().expect("the apiserver stops");
    assert!(!is_running(old_pid), "kube-apiserver {old_pid} still runs");
    assert!(is_running(etcd_pid), "etcd must keep running");
    configmaps
        .get("before-outage")
        .await
        .expect_err("requests fail while the apiserver is stopped");
    cp.stop_apiserver().expect("stopping again is a no-op");

    cp.start_apiserver().await.expect("the apiserver restarts");
    let [_, new_pid] = cp.pids();
    assert_ne!(new_pid, old_pid);
    assert!(is_running(new_pid));

    // The client built before the outage reconnects; the data is still in etcd.
    let got = get_within(&configmaps, "before-outage", Duration::from_secs(30)).await;
    assert_eq!(
        got.data
            .unwrap_or_default()
            .get("value")
            .map(String::as_str),
        Some("kept")
    );
    let kc = Kubeconfig::read_from(&kubeconfig).expect("the kubeconfig parses");
    let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .expect("a client config");
    let agent = Client::try_from(config).expect("a client");
    let version = agent.apiserver_version().await;
    assert!(version.is_ok(), "the old kubeconfig fails: {version:?}");

    cp.start_apiserver()
        .await
        .expect("starting a running apiserver is a no-op");
    assert_eq!(cp.pids()[1], new_pid);

    cp.shutdown();
    assert!(!is_running(new_pid) && !is_running(etcd_pid));
    cp.start_apiserver()
        .await
        .expect_err("no restart after shutdown");
}
