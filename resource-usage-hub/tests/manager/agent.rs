//! The whole loop: the work's manifests run the agent on a second apiserver (the managed
//! cluster), and it scores on the hub.

use super::*;

/// The managed cluster: a second apiserver of its own.
async fn managed() -> &'static ControlPlane {
    static MANAGED: tokio::sync::OnceCell<ControlPlane> = tokio::sync::OnceCell::const_new();
    MANAGED
        .get_or_init(|| async {
            ControlPlane::start(testenv::Options::default())
                .await
                .unwrap_or_else(|e| panic!("cannot start the managed cluster's apiserver: {e}"))
        })
        .await
}

/// The agent binary (built by `cargo build` if this test runs alone).
fn agent_binary() -> PathBuf {
    let exe = std::env::current_exe().expect("test exe");
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target profile dir")
        .to_path_buf();
    let bin = dir.join("resource-usage-agent");
    if !bin.exists() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let status = Command::new(cargo)
            .args([
                "build",
                "-p",
                "resource-usage-agent",
                "--bin",
                "resource-usage-agent",
            ])
            .status()
            .expect("cargo build");
        assert!(status.success(), "building the agent");
    }
    bin
}

#[tokio::test]
async fn the_works_manifests_run_the_agent_that_scores_on_the_hub() {
    let hub_cp = testenv::shared().await;
    let spoke_cp = managed().await;
    let hub = hub_cp.client().expect("hub client");
    let spoke = spoke_cp.client().expect("managed client");
    let addon = "loop-addon";
    apply_agent_role(&hub, addon).await;
    let cluster = cluster(&hub, "loop-cluster").await;
    create_cma(&hub, addon, json!({"type": "Manual"})).await;
    create_mca(&hub, &cluster, addon).await;
    let _m = start(hub_cp, settings(addon));
    let w = eventually("the work", DEADLINE, || work(&hub, &cluster, addon)).await;

    // Apply the manifests as the work agent would (the klusterlet pre-creates the namespace).
    let ns: Namespace =
        serde_json::from_value(json!({"metadata": {"name": AGENT_NS}})).expect("ns");
    match Api::<Namespace>::all(spoke.clone())
        .create(&PostParams::default(), &ns)
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => panic!("agent namespace: {e}"),
    }
    let mut deployment = None;
    for m in &w.spec.workload.manifests {
        let obj = &m.raw;
        testenv::apply(&spoke, obj, AGENT_NS)
            .await
            .unwrap_or_else(|e| panic!("the managed cluster refuses {}: {e}", obj["kind"]));
        if obj["kind"] == "Deployment" {
            deployment = Some(obj.clone());
        }
    }
    let deployment = deployment.expect("a Deployment in the work");
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    let args: Vec<String> = container["args"]
        .as_array()
        .expect("args")
        .iter()
        .filter_map(|a| a.as_str().map(str::to_owned))
        .collect();
    let sa = deployment["spec"]["template"]["spec"]["serviceAccountName"]
        .as_str()
        .expect("service account")
        .to_owned();
    assert!(
        Api::<ServiceAccount>::namespaced(spoke.clone(), AGENT_NS)
            .get_opt(&sa)
            .await
            .expect("sa")
            .is_some()
    );

    // What the kubelet and the klusterlet give the pod: the service account's token for the
    // managed cluster, the registration certificate's kubeconfig for the hub.
    let dir = tempdir(&cluster);
    let token = Api::<ServiceAccount>::namespaced(spoke.clone(), AGENT_NS)
        .create_token_request(&sa, &PostParams::default(), &Default::default())
        .await
        .expect("token request")
        .status
        .expect("token")
        .token;
    let managed_kubeconfig = dir.join("managed-kubeconfig");
    std::fs::write(
        &managed_kubeconfig,
        token_kubeconfig(spoke_cp, &dir, &token),
    )
    .expect("write kubeconfig");
    let hub_dir = dir.join("hub-kubeconfig");
    std::fs::create_dir_all(&hub_dir).expect("dir");
    let agent_name = format!("{addon}-agent");
    let groups = default_groups(&cluster, addon);
    let g: Vec<&str> = groups.iter().map(String::as_str).collect();
    let cert = hub_cp
        .client_certificate(
            &default_user(&cluster, addon, &agent_name),
            &g,
            Duration::from_secs(3600),
        )
        .expect("cert");
    hub_cp
        .write_cert_kubeconfig(&hub_dir, &cert)
        .expect("hub kubeconfig");

    // A node for the agent to count.
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": format!("{cluster}-node")},
        "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"},
                   "capacity": {"cpu": "8", "memory": "32Gi", "pods": "110"},
                   "conditions": [{"type": "Ready", "status": "True"}]}
    }))
    .expect("node");
    let nodes = Api::<Node>::all(spoke.clone());
    let created = nodes
        .create(&PostParams::default(), &node)
        .await
        .expect("node");
    nodes
        .patch_status(
            &created.name_any(),
            &PatchParams::default(),
            &Patch::Merge(json!({"status": node.status})),
        )
        .await
        .expect("node status");
    nodes
        .patch(
            &created.name_any(),
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"taints": []}})),
        )
        .await
        .expect("node taints");

    // The Deployment's arguments, with the mount path and the port mapped to this machine.
    let args: Vec<String> = args
        .into_iter()
        .map(|a| {
            a.replace("/managed/hub-kubeconfig", &hub_dir.display().to_string())
                .replace("0.0.0.0:8080", "127.0.0.1:0")
        })
        .collect();
    assert!(
        args.iter()
            .any(|a| a == &format!("--cluster-name={cluster}"))
    );
    let child = Command::new(agent_binary())
        .args(&args)
        .env("KUBECONFIG", &managed_kubeconfig)
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("agent");
    let _agent = Process(child);
    let scores = Api::<AddOnPlacementScore>::namespaced(hub.clone(), &cluster);
    let score = eventually("the agent's score on the hub", DEADLINE, || async {
        scores
            .get_opt("resource-usage-score")
            .await
            .ok()
            .flatten()
            .filter(|s| s.status.as_ref().is_some_and(|st| !st.scores.is_empty()))
    })
    .await;
    let status = score.status.expect("status");
    assert!(
        status.scores.iter().any(|s| s.name == "cpuAvailable"),
        "{:?}",
        status.scores
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A kubeconfig that authenticates with a service-account token, as in a pod.
fn token_kubeconfig(cp: &ControlPlane, dir: &Path, token: &str) -> String {
    let ca = dir.join("ca.crt");
    std::fs::write(&ca, cp.ca_pem().expect("ca")).expect("write ca");
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: managed\n  cluster:\n    server: {}\n    certificate-authority: {:?}\nusers:\n- name: agent\n  user:\n    token: {token}\ncontexts:\n- name: managed\n  context:\n    cluster: managed\n    user: agent\ncurrent-context: managed\n",
        cp.server(),
        ca.display().to_string()
    )
}
