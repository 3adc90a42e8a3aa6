//! Install, upgrade and uninstall into real apiservers, the CRDs when asked, and the metrics the
//! alerts and the dashboard name, scraped from the binaries run as the chart runs them.

use super::*;

async fn kubeconfig(cp: &ControlPlane, tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("chart-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let path = dir.join("kubeconfig");
    cp.write_kubeconfig(&path).expect("kubeconfig");
    path
}

async fn run(args: Vec<String>, kubeconfig: PathBuf) -> std::process::Output {
    e2e::chart::helm_on(args, kubeconfig)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

fn strings(a: &[&str]) -> Vec<String> {
    a.iter().map(|s| (*s).to_owned()).collect()
}

#[tokio::test]
async fn installs_upgrades_and_uninstalls_on_a_hub() {
    // A hub running OCM's cluster-manager: the CRDs are there already.
    let cp = testenv::shared().await;
    let client = cp.client().expect("client");
    let ns = testenv::namespace(&client, "ocm-placement")
        .await
        .expect("ns");
    let kc = kubeconfig(cp, "hub").await;
    let chart = chart();
    let registry = registry();
    run(
        strings(&[
            "install",
            "r",
            &chart,
            "--namespace",
            &ns,
            "--set",
            &registry,
            "--set",
            "scheduler.enabled=true",
        ]),
        kc.clone(),
    )
    .await;

    let deployments = Api::<Deployment>::namespaced(client.clone(), &ns);
    for name in ["placement-scheduler", "resource-usage-hub-manager"] {
        let d = deployments.get(name).await.expect("deployment");
        assert_eq!(d.spec.and_then(|s| s.replicas), Some(2));
        Api::<ServiceAccount>::namespaced(client.clone(), &ns)
            .get(name)
            .await
            .expect("service account");
    }
    let cma = Api::<ClusterManagementAddOn>::all(client.clone())
        .get("resource-usage-collect")
        .await
        .expect("the add-on");
    assert_eq!(cma.spec.install_strategy.type_, "Placements");
    Api::<Placement>::namespaced(client.clone(), &ns)
        .get("resource-usage-collect-global")
        .await
        .expect("placement");
    Api::<ManagedClusterSetBinding>::namespaced(client.clone(), &ns)
        .get("global")
        .await
        .expect("binding");
    let roles = Api::<ClusterRole>::all(client.clone());
    roles
        .get("open-cluster-management:placement-scheduler")
        .await
        .expect("scheduler role");
    roles
        .get("open-cluster-management:resource-usage-collect:agent-hub")
        .await
        .expect("the agent's hub role");
    let policies = Api::<ValidatingAdmissionPolicy>::all(client.clone());
    let policy_bindings = Api::<ValidatingAdmissionPolicyBinding>::all(client.clone());
    let policy = "ocm-placement-resource-usage-collect-manager";
    policies.get(policy).await.expect("the manager's policy");
    policy_bindings
        .get(policy)
        .await
        .expect("the manager's policy binding");

    // Upgrade as the README does (the install's values kept): fewer scheduler replicas, the
    // scorer on.
    run(
        strings(&[
            "upgrade",
            "r",
            &chart,
            "--namespace",
            &ns,
            "--reset-then-reuse-values",
            "--set",
            "scheduler.replicas=1,scorer.enabled=true,scorer.prometheusURL=http://prometheus:9090",
        ]),
        kc.clone(),
    )
    .await;
    let scheduler = deployments
        .get("placement-scheduler")
        .await
        .expect("scheduler kept: the install's scheduler.enabled reused");
    assert_eq!(scheduler.spec.as_ref().and_then(|s| s.replicas), Some(1));
    let image = scheduler
        .spec
        .and_then(|s| s.template.spec)
        .and_then(|s| s.containers.into_iter().next())
        .and_then(|c| c.image);
    assert_eq!(
        image.as_deref(),
        Some("registry.example.com/ocm-placement/placement-scheduler:0.1.0"),
        "the install's image.registry reused"
    );
    deployments
        .get("resource-usage-hub-scorer")
        .await
        .expect("scorer after the upgrade");
    roles
        .get("open-cluster-management:resource-usage-hub:scorer")
        .await
        .expect("scorer role");
    // Its built-in ScoreDefinition, the CRD being there (testenv installs crds/ as a hub with
    // the chart has it).
    let definitions = Api::<ScoreDefinition>::all(client.clone());
    let builtin = definitions
        .get("resource-usage")
        .await
        .expect("the built-in ScoreDefinition after the upgrade");
    assert_eq!(builtin.spec.score_name, "resource-usage-score");

    // The binaries run with exactly the chart's arguments, as the chart's service accounts
    // (the RBAC it installed), against this hub: they come up, and the scheduler writes the
    // chart's Placement.
    run_as_the_chart(cp, &ns).await;

    // Uninstall: everything goes.
    run(strings(&["uninstall", "r", "--namespace", &ns]), kc.clone()).await;
    eventually("everything removed", DEADLINE, || async {
        let gone = deployments
            .list(&Default::default())
            .await
            .ok()?
            .items
            .is_empty()
            && Api::<ClusterManagementAddOn>::all(client.clone())
                .get_opt("resource-usage-collect")
                .await
                .ok()?
                .is_none()
            && roles
                .get_opt("open-cluster-management:placement-scheduler")
                .await
                .ok()?
                .is_none()
            && roles
                .get_opt("open-cluster-management:resource-usage-collect:agent-hub")
                .await
                .ok()?
                .is_none()
            && policies.get_opt(policy).await.ok()?.is_none()
            && definitions.get_opt("resource-usage").await.ok()?.is_none()
            && policy_bindings.get_opt(policy).await.ok()?.is_none()
            && Api::<Placement>::namespaced(client.clone(), &ns)
                .list(&Default::default())
                .await
                .ok()?
                .items
                .is_empty()
            && Api::<ServiceAccount>::namespaced(client.clone(), &ns)
                .list(&Default::default())
                .await
                .ok()?
                .items
                .iter()
                .all(|a| a.metadata.name.as_deref() == Some("default"))
            && Api::<k8s_openapi::api::rbac::v1::Role>::namespaced(client.clone(), &ns)
                .list(&Default::default())
                .await
                .ok()?
                .items
                .is_empty()
            && Api::<ManagedClusterSetBinding>::namespaced(client.clone(), &ns)
                .list(&Default::default())
                .await
                .ok()?
                .items
                .is_empty()
            && Api::<PodDisruptionBudget>::namespaced(client.clone(), &ns)
                .list(&Default::default())
                .await
                .ok()?
                .items
                .is_empty();
        gone.then_some(())
    })
    .await;

    // The production values, installed into the same hub (the cluster-scoped objects are
    // free again): the apiserver takes every setting, and the live objects carry them.
    installs_the_production_values(cp, &kc).await;
}

/// `ci/production-values.yaml` installed: each live Deployment has the settings the file gives
/// its component, each component a PodDisruptionBudget over its pods.
async fn installs_the_production_values(cp: &ControlPlane, kc: &std::path::Path) {
    let client = cp.client().expect("client");
    let ns = testenv::namespace(&client, "ocm-placement-prod")
        .await
        .expect("ns");
    let values_file = production_values();
    run(
        strings(&[
            "install",
            "prod",
            &chart(),
            "--namespace",
            &ns,
            "-f",
            &values_file,
        ]),
        kc.to_path_buf(),
    )
    .await;
    let values: Value =
        serde_saphyr::from_str(&std::fs::read_to_string(&values_file).expect("values"))
            .expect("values YAML");
    let deployments = Api::<Deployment>::namespaced(client.clone(), &ns);
    let budgets = Api::<PodDisruptionBudget>::namespaced(client.clone(), &ns);
    for (key, name, image) in [
        ("scheduler", "placement-scheduler", "placement-scheduler"),
        (
            "manager",
            "resource-usage-hub-manager",
            "resource-usage-hub",
        ),
        ("scorer", "resource-usage-hub-scorer", "resource-usage-hub"),
    ] {
        let v = &values[key];
        let live =
            serde_json::to_value(deployments.get(name).await.expect("deployment")).expect("JSON");
        let template = &live["spec"]["template"];
        let spec = &template["spec"];
        assert_eq!(live["spec"]["replicas"], v["replicas"], "{name}");
        assert_eq!(
            spec["containers"][0]["image"],
            format!(
                "{REGISTRY}/{image}@{}",
                v["imageDigest"].as_str().expect("digest")
            ),
            "{name}"
        );
        assert_eq!(spec["priorityClassName"], v["priorityClassName"], "{name}");
        assert_eq!(spec["nodeSelector"], v["nodeSelector"], "{name}");
        assert_eq!(spec["tolerations"], v["tolerations"], "{name}");
        if !v["affinity"].is_null() {
            assert_eq!(spec["affinity"], v["affinity"], "{name}");
        }
        for (i, c) in v["topologySpreadConstraints"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            let got = &spec["topologySpreadConstraints"][i];
            for field in ["maxSkew", "topologyKey", "whenUnsatisfiable"] {
                assert_eq!(got[field], c[field], "{name}: {field}");
            }
            assert_eq!(
                got["labelSelector"]["matchLabels"],
                json!({"app.kubernetes.io/instance": "prod", "app.kubernetes.io/name": name}),
                "{name}"
            );
        }
        for (k, val) in v["podAnnotations"].as_object().into_iter().flatten() {
            assert_eq!(&template["metadata"]["annotations"][k], val, "{name}");
        }
        for (k, val) in v["podLabels"].as_object().into_iter().flatten() {
            assert_eq!(&template["metadata"]["labels"][k], val, "{name}");
        }
        let args: Vec<&Value> = spec["containers"][0]["args"]
            .as_array()
            .expect("args")
            .iter()
            .collect();
        let extra: Vec<&Value> = v["extraArgs"]
            .as_array()
            .expect("extraArgs")
            .iter()
            .collect();
        assert!(args.ends_with(&extra), "{name}: {args:?}");
        let pdb = serde_json::to_value(budgets.get(name).await.expect("the budget")).expect("JSON");
        assert_eq!(
            pdb["spec"]["selector"]["matchLabels"], live["spec"]["selector"]["matchLabels"],
            "{name}"
        );
        let max = &v["podDisruptionBudget"]["maxUnavailable"];
        assert_eq!(
            pdb["spec"]["maxUnavailable"],
            if max.is_null() { json!(1) } else { max.clone() },
            "{name}"
        );
        assert_eq!(pdb["spec"]["unhealthyPodEvictionPolicy"], "AlwaysAllow");
    }
    run(
        strings(&["uninstall", "prod", "--namespace", &ns]),
        kc.to_path_buf(),
    )
    .await;
    eventually("the production release removed", DEADLINE, || async {
        (deployments
            .list(&Default::default())
            .await
            .ok()?
            .items
            .is_empty()
            && budgets
                .list(&Default::default())
                .await
                .ok()?
                .items
                .is_empty())
        .then_some(())
    })
    .await;
}

#[tokio::test]
async fn installs_the_crds_when_asked_and_keeps_them() {
    // A bare hub: no OCM CRDs. The README's commands for it, run as printed: the CRDs without
    // the manager (its add-on objects need the CRDs first), then the manager, keeping the
    // install's values.
    let cp = ControlPlane::start(testenv::Options::default())
        .await
        .expect("a bare control plane");
    let client = cp.client().expect("client");
    let ns = e2e::chart::README_NAMESPACE;
    let release = e2e::chart::README_RELEASE;
    let kc = kubeconfig(&cp, "bare").await;
    let block = e2e::chart::readme_block("On a bare hub").expect("the README's bare-hub commands");
    let out = e2e::chart::run_as_printed(block.clone(), kc.clone())
        .await
        .expect("run the README's commands");
    assert!(
        out.status.success(),
        "{block}: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let crds = Api::<CustomResourceDefinition>::all(client.clone());
    let names: Vec<String> = ocm_api::crds::all()
        .iter()
        .filter_map(|c| c.metadata.name.clone())
        .collect();
    for n in &names {
        crds.get(n).await.expect("CRD installed");
    }
    let deployments = Api::<Deployment>::namespaced(client.clone(), ns);
    let manager = deployments
        .get("resource-usage-hub-manager")
        .await
        .expect("the manager, on after the second command");
    let image = manager
        .spec
        .and_then(|s| s.template.spec)
        .and_then(|s| s.containers.into_iter().next())
        .and_then(|c| c.image);
    assert_eq!(
        image.as_deref(),
        Some("registry.example.com/ocm-placement/resource-usage-hub:0.1.0"),
        "the install's image.registry kept"
    );
    Api::<ClusterManagementAddOn>::all(client.clone())
        .get("resource-usage-collect")
        .await
        .expect("the add-on");
    run(strings(&["uninstall", release, "--namespace", ns]), kc).await;
    eventually("the manager removed", DEADLINE, || async {
        deployments
            .list(&Default::default())
            .await
            .ok()?
            .items
            .is_empty()
            .then_some(())
    })
    .await;
    for n in &names {
        crds.get(n).await.expect("CRDs are kept");
    }
}

/// On a bare apiserver, `helm install` with the scorer installs the chart's own CRD first
/// (`crds/`) and then its built-in ScoreDefinition, with the release's values; uninstall
/// removes the definition and keeps the CRD (helm never deletes what crds/ installed).
#[tokio::test]
async fn installs_the_scorer_with_its_definition_on_a_bare_hub() {
    let cp = ControlPlane::start(testenv::Options::default())
        .await
        .expect("a bare control plane");
    let client = cp.client().expect("client");
    let crds = Api::<CustomResourceDefinition>::all(client.clone());
    let crd = "scoredefinitions.scoring.ocm-placement.io";
    assert!(crds.get_opt(crd).await.expect("CRDs").is_none());
    let kc = kubeconfig(&cp, "scorer").await;
    let ns = "scoring";
    run(
        strings(&[
            "install",
            "r",
            &chart(),
            "--namespace",
            ns,
            "--create-namespace",
            "--set",
            &registry(),
            "--set",
            "manager.enabled=false,scorer.enabled=true,scorer.prometheusURL=http://prometheus:9090",
            "--set",
            "scorer.normalise=fleet,scorer.scoreName=hub-usage",
        ]),
        kc.clone(),
    )
    .await;
    crds.get(crd).await.expect("the CRD from crds/");
    let definitions = Api::<ScoreDefinition>::all(client.clone());
    let d = definitions
        .get("resource-usage")
        .await
        .expect("the built-in ScoreDefinition");
    assert_eq!(d.spec.score_name, "hub-usage");
    assert!(
        d.spec
            .scores
            .iter()
            .all(|s| s.normalise.type_ == ocm_api::scoring::v1alpha1::NormaliseType::MinMax),
        "{d:?}"
    );
    Api::<Deployment>::namespaced(client.clone(), ns)
        .get("resource-usage-hub-scorer")
        .await
        .expect("the scorer");

    run(strings(&["uninstall", "r", "--namespace", ns]), kc.clone()).await;
    eventually("the definition removed", DEADLINE, || async {
        definitions
            .get_opt("resource-usage")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    crds.get(crd).await.expect("the CRD kept");
}

/// Runs the chart's three components with exactly the arguments it renders from the production
/// values (their extra flags included), as the chart's service accounts, and a resource-usage
/// agent: they come up, the scheduler schedules the
/// chart's Placement, and every metric the chart's alerts and dashboard name is one of theirs.
/// prometheus-client shows a labelled family only once it has a series, so the scene makes
/// each series real: a cluster for the add-on whose namespace refuses ManifestWorks (a quota
/// of 0: the manager's write fails), the chart's scorer against an empty Prometheus (it
/// evaluates the release's built-in ScoreDefinition: every cluster stale), a second scorer whose
/// Prometheus does not resolve (its queries fail), and a scheduler and a manager run as an
/// identity without RBAC (their watches fail).
async fn run_as_the_chart(cp: &ControlPlane, ns: &str) {
    let client = cp.client().expect("client");
    let cluster = format!("{ns}-c1");
    for (obj, namespace) in [
        (
            json!({"apiVersion": "cluster.open-cluster-management.io/v1beta2", "kind": "ManagedClusterSet",
                "metadata": {"name": "global"},
                "spec": {"clusterSelector": {"selectorType": "LabelSelector", "labelSelector": {}}}}),
            "",
        ),
        (
            // Labelled as OCM's registration labels a cluster's namespace (the manager's
            // admission policy writes nowhere else): the quota is what refuses the work.
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": cluster,
                "labels": {"open-cluster-management.io/cluster-name": cluster}}}),
            "",
        ),
        (
            json!({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "no-works"},
                "spec": {"hard": {"count/manifestworks.work.open-cluster-management.io": "0"}}}),
            cluster.as_str(),
        ),
        (
            json!({"apiVersion": "cluster.open-cluster-management.io/v1", "kind": "ManagedCluster",
                "metadata": {"name": cluster}, "spec": {"hubAcceptsClient": true}}),
            "",
        ),
    ] {
        testenv::apply(&client, &obj, namespace)
            .await
            .unwrap_or_else(|e| panic!("{obj}: {e}"));
    }
    // No kube-controller-manager here: the quota's status as its quota controller would set it
    // (without one, admission lets creates through).
    let works = "count/manifestworks.work.open-cluster-management.io";
    Api::<ResourceQuota>::namespaced(client.clone(), &cluster)
        .patch_status(
            "no-works",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"hard": {works: "0"}, "used": {works: "0"}}})),
        )
        .await
        .expect("the quota's status");

    // The production values: the binaries take their extra flags. The chart's scorer reads a
    // real (empty) Prometheus: its evaluations of the release's built-in definition succeed,
    // which makes its per-definition gauges' series.
    let exporter = testenv::prometheus::Exporter::start()
        .await
        .expect("exporter");
    let prometheus =
        testenv::prometheus::Prometheus::start(&[exporter.addr()], Duration::from_secs(1))
            .await
            .expect("prometheus");
    let docs = e2e::chart::render(
        &e2e::chart::chart_dir(),
        ns,
        &[
            "-f",
            &production_values(),
            "--set",
            &format!("scorer.prometheusURL={}", prometheus.url()),
        ],
    )
    .expect("helm template");
    let bins = e2e::fleet::binaries(false).expect("binaries");
    let running = e2e::chart::run_as_the_chart(cp, &docs, ns, &bins)
        .await
        .expect("the chart's components");
    assert_eq!(running.ports.len(), 3, "{:?}", running.ports);
    eventually(
        "the chart's Placement scheduled by the chart's scheduler",
        DEADLINE,
        || async {
            let p = Api::<Placement>::namespaced(client.clone(), ns)
                .get("resource-usage-collect-global")
                .await
                .ok()?;
            p.status
                .filter(|s| s.conditions.iter().any(|c| c.type_ == "PlacementSatisfied"))
                .map(|_| ())
        },
    )
    .await;

    // The agent (on a managed cluster in production; here this apiserver plays the cluster
    // too), and the scheduler and the manager without RBAC.
    let mut others = Vec::new();
    let mut ports: Vec<(String, u16)> = running.ports.clone();
    let admin = std::env::temp_dir().join(format!("chart-agent-{}", std::process::id()));
    cp.write_kubeconfig(&admin).expect("kubeconfig");
    let nobody = std::env::temp_dir().join(format!("chart-nobody-{}", std::process::id()));
    std::fs::write(&nobody, cp.kubeconfig_as_service_account(ns, "nobody")).expect("kubeconfig");
    let (admin, nobody) = (admin.display().to_string(), nobody.display().to_string());
    for (name, binary, args) in [
        (
            "agent",
            "resource-usage-agent",
            vec![
                "run".to_owned(),
                format!("--hub-kubeconfig={admin}"),
                format!("--kubeconfig={admin}"),
                format!("--cluster-name={cluster}"),
                format!("--addon-namespace={ns}"),
            ],
        ),
        (
            "scorer whose Prometheus does not resolve",
            "resource-usage-hub",
            vec![
                "scorer".to_owned(),
                "--leader-elect=false".to_owned(),
                "--prometheus-url=http://prometheus.invalid:9090".to_owned(),
                "--prometheus-attempts=1".to_owned(),
                format!("--hub-kubeconfig={admin}"),
            ],
        ),
        (
            "scheduler without RBAC",
            "placement-scheduler",
            vec![
                "controller".to_owned(),
                "--leader-elect=false".to_owned(),
                "--debug-bind-address=".to_owned(),
                format!("--kubeconfig={nobody}"),
            ],
        ),
        (
            "manager without RBAC",
            "resource-usage-hub",
            vec![
                "manager".to_owned(),
                "--leader-elect=false".to_owned(),
                "--agent-image=agent:test".to_owned(),
                format!("--kubeconfig={nobody}"),
            ],
        ),
    ] {
        let port = e2e::chart::free_port().expect("port");
        let child = std::process::Command::new(bins.join(binary))
            .args(&args)
            .arg(format!("--metrics-bind-address=127.0.0.1:{port}"))
            .env("POD_NAMESPACE", ns)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        others.push(child);
        ports.push((name.to_owned(), port));
    }

    let named = named_metrics();
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    let missing = loop {
        let mut exported = BTreeSet::new();
        for (_, port) in &ports {
            if let Ok((200, page)) =
                testenv::http::get(([127, 0, 0, 1], *port).into(), "/metrics").await
            {
                exported.extend(e2e::chart::exported_names(&page));
            }
        }
        let missing: Vec<&String> = named.keys().filter(|n| !exported.contains(*n)).collect();
        if missing.is_empty() || std::time::Instant::now() > deadline {
            break missing;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    for mut c in others {
        let _ = c.kill();
        let _ = c.wait();
    }
    drop(running);
    drop(prometheus);
    assert!(
        missing.is_empty(),
        "named by files/prometheus-rules.yaml or files/grafana-dashboard.json but exported by no binary (scraped: {ports:?}): {missing:?} (where: {named:?})"
    );
}

/// Every metric name in the alert expressions and the dashboard's queries, with where it is.
fn named_metrics() -> BTreeMap<String, String> {
    let files = e2e::chart::chart_dir().join("files");
    let rules: Value = serde_saphyr::from_str(
        &std::fs::read_to_string(files.join("prometheus-rules.yaml")).expect("rules file"),
    )
    .expect("rules YAML");
    let dashboard: Value = serde_json::from_str(
        &std::fs::read_to_string(files.join("grafana-dashboard.json")).expect("dashboard"),
    )
    .expect("dashboard JSON");
    let mut exprs = Vec::new();
    for g in rules["groups"].as_array().expect("groups") {
        for r in g["rules"].as_array().expect("rules") {
            let what = r["alert"].as_str().or(r["record"].as_str()).unwrap_or("?");
            exprs.push((
                format!("alert {what}"),
                r["expr"].as_str().expect("expr").to_owned(),
            ));
        }
    }
    for p in dashboard["panels"].as_array().expect("panels") {
        for t in p["targets"].as_array().expect("targets") {
            exprs.push((
                format!("panel {}", p["title"].as_str().unwrap_or("?")),
                t["expr"].as_str().expect("expr").to_owned(),
            ));
        }
    }
    let mut named = BTreeMap::new();
    for (what, expr) in &exprs {
        for name in e2e::chart::promql_metric_names(expr) {
            named.entry(name).or_insert_with(|| what.clone());
        }
    }
    // The parser found what is there (a guard against a parser that finds nothing).
    assert!(named.len() >= 15, "{named:?}");
    named
}
