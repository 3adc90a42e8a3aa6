//! Upgrading a release of the chart as an earlier commit had it (`fixtures/chart-29155e1`, with
//! the scheduler on by default and no monitoring values) to the current chart with the upgrade
//! command the chart README prints, run as printed (the README names the release and the
//! namespace this test uses), with the real `helm`, on a bare hub whose OCM CRDs the chart
//! installs (`installCRDs=true`): the release then has the current chart's defaults under the
//! values the user set, the Placements' decisions and the agents' scores stay, no CRD is lost
//! or recreated, and the current components run under the upgraded RBAC. Turning the scorer on
//! then needs the chart's own CRD (crds/, which helm installs at install only): the upgrade
//! refuses with the command that applies it, and passes once it is applied. Its own control
//! plane: the chart's cluster-scoped objects (CRDs, ClusterRoles, the add-on) have fixed names,
//! and the chart test's hub already has the CRDs.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use e2e::chart::{
    README_NAMESPACE, README_RELEASE, chart_dir, fixture, helm_on, readme_block, run_as_printed,
    run_as_the_chart,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams, PostParams};
use ocm_api::scoring::ScoreDefinition;
use ocm_api::{AddOnPlacementScore, Placement, PlacementDecision};
use serde_json::{Value, json};
use testenv::{ControlPlane, eventually};

const DEADLINE: Duration = Duration::from_secs(60);

/// What the user set at install, as the README's install commands do: the registry, the CRDs,
/// no manager yet (the add-on's objects need the CRDs first). Nothing about the scheduler: the
/// earlier chart's default (on) ran it.
const INSTALLED: &str =
    "image.registry=registry.example.com/ocm-placement,installCRDs=true,manager.enabled=false";

fn strings(a: &[&str]) -> Vec<String> {
    a.iter().map(|s| (*s).to_owned()).collect()
}

async fn helm(args: &[&str], kubeconfig: &Path) -> std::process::Output {
    helm_on(strings(args), kubeconfig.to_path_buf())
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

/// Decision name -> (uid, clusters) of the Placement `name`.
async fn decisions(
    client: &kube::Client,
    ns: &str,
    name: &str,
) -> BTreeMap<String, (String, Vec<String>)> {
    let list = Api::<PlacementDecision>::namespaced(client.clone(), ns)
        .list(&kube::api::ListParams::default().labels(&format!(
            "cluster.open-cluster-management.io/placement={name}"
        )))
        .await
        .expect("decisions");
    list.items
        .into_iter()
        .map(|d| {
            let clusters = d
                .status
                .map(|s| s.decisions.into_iter().map(|c| c.cluster_name).collect())
                .unwrap_or_default();
            (
                d.metadata.name.unwrap_or_default(),
                (d.metadata.uid.unwrap_or_default(), clusters),
            )
        })
        .collect()
}

/// CRD name -> uid: a CRD deleted and created again (which deletes every object of its kind)
/// has a new uid.
async fn crds(client: &kube::Client) -> BTreeMap<String, String> {
    Api::<CustomResourceDefinition>::all(client.clone())
        .list(&Default::default())
        .await
        .expect("CRDs")
        .items
        .into_iter()
        .map(|c| {
            (
                c.metadata.name.unwrap_or_default(),
                c.metadata.uid.unwrap_or_default(),
            )
        })
        .collect()
}

/// The release's manifest (`helm get manifest`), parsed: what the components run as.
async fn manifest(kubeconfig: &Path) -> Vec<Value> {
    let out = helm(
        &[
            "get",
            "manifest",
            README_RELEASE,
            "--namespace",
            README_NAMESPACE,
        ],
        kubeconfig,
    )
    .await;
    serde_saphyr::from_multiple::<Value>(&String::from_utf8_lossy(&out.stdout))
        .expect("the manifest's YAML")
        .into_iter()
        .filter(|d| !d.is_null())
        .collect()
}

/// `helm get values --all`: every value the release renders with.
async fn release_values(kubeconfig: &Path) -> Value {
    let out = helm(
        &[
            "get",
            "values",
            README_RELEASE,
            "--namespace",
            README_NAMESPACE,
            "--all",
            "-o",
            "json",
        ],
        kubeconfig,
    )
    .await;
    serde_json::from_slice(&out.stdout).expect("helm get values JSON")
}

/// `over` laid over `base`, maps merged key by key (as Helm merges values).
fn merged(mut base: Value, over: &Value) -> Value {
    match (base.as_object_mut(), over.as_object()) {
        (Some(b), Some(o)) => {
            for (k, v) in o {
                let merged_value = merged(b.get(k).cloned().unwrap_or(Value::Null), v);
                b.insert(k.clone(), merged_value);
            }
            base
        }
        _ => over.clone(),
    }
}

/// `a.b=x,c=y` as nested JSON (strings and booleans only).
fn set_values(set: &str) -> Value {
    let mut out = json!({});
    for pair in set.split(',') {
        let (key, value) = pair.split_once('=').expect("key=value");
        let value = match value {
            "true" => json!(true),
            "false" => json!(false),
            v => json!(v),
        };
        let nested = key.rsplit('.').fold(value, |inner, k| json!({ k: inner }));
        out = merged(out, &nested);
    }
    out
}

#[tokio::test]
async fn upgrades_an_earlier_chart_with_the_readme_command() {
    let ns = README_NAMESPACE;
    let old_chart = fixture("chart-29155e1").display().to_string();
    let new_chart = chart_dir().display().to_string();
    let cp = ControlPlane::start(testenv::Options::default())
        .await
        .expect("a bare control plane");
    let client = cp.client().expect("client");
    let dir = std::env::temp_dir().join(format!("chart-upgrade-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let kc = dir.join("kubeconfig");
    cp.write_kubeconfig(&kc).expect("kubeconfig");

    // Revision 1: the earlier chart, as a bare hub installs it: the CRDs and its default
    // scheduler.
    helm(
        &[
            "install",
            README_RELEASE,
            &old_chart,
            "--namespace",
            ns,
            "--create-namespace",
            "--set",
            INSTALLED,
        ],
        &kc,
    )
    .await;
    let crds_before = crds(&client).await;
    assert!(
        crds_before.len() >= ocm_api::crds::all().len(),
        "{crds_before:?}"
    );

    // A fleet of three clusters with the agents' scores, and a Placement that takes the one
    // with the most free CPU.
    for obj in [
        json!({"apiVersion": "cluster.open-cluster-management.io/v1beta2", "kind": "ManagedClusterSet",
            "metadata": {"name": "fleet"}, "spec": {"clusterSelector": {"selectorType": "ExclusiveClusterSetLabel"}}}),
        json!({"apiVersion": "cluster.open-cluster-management.io/v1beta2", "kind": "ManagedClusterSetBinding",
            "metadata": {"name": "fleet", "namespace": ns}, "spec": {"clusterSet": "fleet"}}),
        json!({"apiVersion": "cluster.open-cluster-management.io/v1beta1", "kind": "Placement",
            "metadata": {"name": "primary", "namespace": ns},
            "spec": {"numberOfClusters": 1, "clusterSets": ["fleet"],
                "prioritizerPolicy": {"mode": "Exact", "configurations": [
                    {"scoreCoordinate": {"type": "AddOn", "addOn": {"resourceName": "resource-usage-score", "scoreName": "cpuAvailable"}}, "weight": 1}]}}}),
    ] {
        testenv::apply(&client, &obj, ns)
            .await
            .unwrap_or_else(|e| panic!("{obj}: {e}"));
    }
    let clusters = [("c1", 10), ("c2", 80), ("c3", 40)];
    let valid_until = jiff::Timestamp::now() + jiff::SignedDuration::from_hours(1);
    for (c, cpu) in clusters {
        let cluster = format!("{ns}-{c}");
        for obj in [
            // Labelled as OCM's registration labels a cluster's namespace: the only namespaces
            // the manager's admission policy lets it write in.
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": cluster,
                "labels": {"open-cluster-management.io/cluster-name": cluster}}}),
            json!({"apiVersion": "cluster.open-cluster-management.io/v1", "kind": "ManagedCluster",
                "metadata": {"name": cluster, "labels": {"cluster.open-cluster-management.io/clusterset": "fleet"}},
                "spec": {"hubAcceptsClient": true}}),
        ] {
            testenv::apply(&client, &obj, "")
                .await
                .unwrap_or_else(|e| panic!("{obj}: {e}"));
        }
        let scores = Api::<AddOnPlacementScore>::namespaced(client.clone(), &cluster);
        let score: AddOnPlacementScore = serde_json::from_value(json!({
            "apiVersion": "cluster.open-cluster-management.io/v1alpha1", "kind": "AddOnPlacementScore",
            "metadata": {"name": "resource-usage-score"}, "spec": {}}))
        .expect("score");
        scores
            .create(&PostParams::default(), &score)
            .await
            .expect("create the score");
        scores
            .patch_status(
                "resource-usage-score",
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {
                    "scores": [{"name": "cpuAvailable", "value": cpu}],
                    "validUntil": valid_until.to_string(),
                    "conditions": []}})),
            )
            .await
            .expect("the score's status");
    }
    let score_versions = || async {
        let mut v = BTreeMap::new();
        for (c, _) in clusters {
            let s = Api::<AddOnPlacementScore>::namespaced(client.clone(), &format!("{ns}-{c}"))
                .get("resource-usage-score")
                .await
                .expect("score");
            v.insert(c, s.metadata.resource_version.unwrap_or_default());
        }
        v
    };

    // The earlier chart's scheduler, as the earlier chart's identity, decides: c2 (80 free).
    let bins = e2e::fleet::binaries(false).expect("binaries");
    let running = run_as_the_chart(&cp, &manifest(&kc).await, ns, &bins)
        .await
        .expect("the earlier chart's scheduler");
    assert_eq!(running.ports.len(), 1, "{:?}", running.ports);
    let want = vec![format!("{ns}-c2")];
    let decided = eventually(
        "the earlier chart's scheduler decides c2",
        DEADLINE,
        || async {
            let d = decisions(&client, ns, "primary").await;
            (d.len() == 1 && d.values().all(|(_, c)| *c == want)).then_some(d)
        },
    )
    .await;
    drop(running);
    let scores_before = score_versions().await;

    // Revision 2: the README's upgrade command, as printed, from the repository root.
    let command = readme_block("## Upgrade").expect("the README's upgrade command");
    assert!(
        command.contains("helm upgrade") && command.contains(&format!("-n {ns}")),
        "{command}"
    );
    let out = run_as_printed(command.clone(), kc.clone())
        .await
        .expect("run the README's upgrade command");
    assert!(
        out.status.success(),
        "{command}: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let status = helm(
        &["status", README_RELEASE, "--namespace", ns, "-o", "json"],
        &kc,
    )
    .await;
    let status: Value = serde_json::from_slice(&status.stdout).expect("helm status JSON");
    assert_eq!(status["info"]["status"], "deployed", "{status}");
    assert_eq!(status["version"], 2, "{status}");

    // The current chart's defaults, under what the user set: nothing of the earlier chart's
    // defaults (its scheduler.enabled: true), nothing missing (monitoring, runbooks, budgets).
    let defaults: Value = serde_saphyr::from_str(
        &std::fs::read_to_string(chart_dir().join("values.yaml")).expect("values.yaml"),
    )
    .expect("values.yaml");
    let want_values = merged(defaults, &set_values(INSTALLED));
    assert_eq!(
        release_values(&kc).await,
        want_values,
        "the values after `{command}`"
    );
    let deployments = Api::<Deployment>::namespaced(client.clone(), ns);
    eventually(
        "the scheduler's Deployment removed (opt-in now)",
        DEADLINE,
        || async {
            deployments
                .get_opt("placement-scheduler")
                .await
                .ok()?
                .is_none()
                .then_some(())
        },
    )
    .await;

    // No CRD lost or recreated; every current one there; the decisions and scores as they were.
    let crds_after = crds(&client).await;
    for (name, uid) in &crds_before {
        assert_eq!(crds_after.get(name), Some(uid), "CRD {name} kept as it was");
    }
    for c in ocm_api::crds::all() {
        let name = c.metadata.name.unwrap_or_default();
        assert!(crds_after.contains_key(&name), "CRD {name}");
    }
    assert_eq!(decisions(&client, ns, "primary").await, decided);
    assert_eq!(score_versions().await, scores_before);

    // Revision 3: our scheduler kept on, as the README says, and the add-on on now that the
    // CRDs exist; the install's values still reused.
    helm(
        &[
            "upgrade",
            README_RELEASE,
            &new_chart,
            "--namespace",
            ns,
            "--reset-then-reuse-values",
            "--set",
            "scheduler.enabled=true,manager.enabled=true",
        ],
        &kc,
    )
    .await;
    let values = release_values(&kc).await;
    assert_eq!(
        values["image"]["registry"],
        "registry.example.com/ocm-placement"
    );
    assert_eq!(values["installCRDs"], true);

    // The current components, as the release renders them, under the upgraded RBAC: the
    // scheduler schedules the add-on's Placement (so it runs passes), and keeps the earlier
    // decision as it is.
    let running = run_as_the_chart(&cp, &manifest(&kc).await, ns, &bins)
        .await
        .expect("the current chart's components");
    assert_eq!(running.ports.len(), 2, "{:?}", running.ports);
    eventually("the add-on's Placement scheduled", DEADLINE, || async {
        let p = Api::<Placement>::namespaced(client.clone(), ns)
            .get("resource-usage-collect-global")
            .await
            .ok()?;
        p.status
            .filter(|s| s.conditions.iter().any(|c| c.type_ == "PlacementSatisfied"))
            .map(|_| ())
    })
    .await;
    // Its first passes cover every Placement: once it has scheduled both (counted on its
    // /metrics), the earlier decision is the current scheduler's too.
    let port = running
        .ports
        .iter()
        .find(|(c, _)| c == "controller")
        .map(|(_, p)| *p)
        .expect("the scheduler's port");
    eventually(
        "the current scheduler's passes over both Placements",
        DEADLINE,
        || async {
            let (_, page) = testenv::http::get(([127, 0, 0, 1], port).into(), "/metrics")
                .await
                .ok()?;
            let passes: f64 = page
                .lines()
                .filter(|l| l.starts_with("placement_schedules_total"))
                .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .sum();
            (passes >= 2.0).then_some(())
        },
    )
    .await;
    assert_eq!(decisions(&client, ns, "primary").await, decided);
    assert_eq!(score_versions().await, scores_before);
    drop(running);

    // Revision 4: the scorer on. Its built-in ScoreDefinition needs the chart's own CRD, which
    // helm installs from crds/ at install only: the upgrade refuses, saying how to apply it,
    // before anything changes; applied as it says, the upgrade creates the definition.
    let scorer_on = "scorer.enabled=true,scorer.prometheusURL=http://prometheus:9090";
    let upgrade = strings(&[
        "upgrade",
        README_RELEASE,
        &new_chart,
        "--namespace",
        ns,
        "--reset-then-reuse-values",
        "--set",
        scorer_on,
    ]);
    let refused = {
        let (args, kc) = (upgrade.clone(), kc.clone());
        tokio::task::spawn_blocking(move || {
            let a: Vec<&str> = args.iter().map(String::as_str).collect();
            testenv::helm::helm_output(&a, Some(&kc))
        })
        .await
        .expect("helm ran")
        .expect("helm ran")
    };
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success()
            && err.contains("kubectl apply --server-side -f charts/ocm-placement/crds/"),
        "{err}"
    );
    let status = helm(
        &["status", README_RELEASE, "--namespace", ns, "-o", "json"],
        &kc,
    )
    .await;
    let status: Value = serde_json::from_slice(&status.stdout).expect("helm status JSON");
    assert_eq!(
        status["version"], 3,
        "the refused upgrade changed nothing: {status}"
    );
    let crd = "scoredefinitions.scoring.ocm-placement.io";
    testenv::apply_yaml(
        &client,
        &std::fs::read_to_string(chart_dir().join("crds/scoredefinitions.yaml"))
            .expect("crds/scoredefinitions.yaml"),
        "",
    )
    .await
    .expect("apply crds/");
    let crd_api = Api::<CustomResourceDefinition>::all(client.clone());
    eventually("the ScoreDefinition CRD established", DEADLINE, || async {
        let c = crd_api.get_opt(crd).await.ok()??;
        c.status?
            .conditions?
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True")
            .then_some(())
    })
    .await;
    helm_on(upgrade, kc.clone())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let definitions = Api::<ScoreDefinition>::all(client.clone());
    definitions
        .get("resource-usage")
        .await
        .expect("the built-in ScoreDefinition");
    let crds_after = crds(&client).await;

    // Uninstall keeps the CRDs, and removes the definition.
    helm(&["uninstall", README_RELEASE, "--namespace", ns], &kc).await;
    assert_eq!(crds(&client).await, crds_after);
    eventually("the definition removed", DEADLINE, || async {
        definitions
            .get_opt("resource-usage")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    let _ = std::fs::remove_dir_all(&dir);
}
