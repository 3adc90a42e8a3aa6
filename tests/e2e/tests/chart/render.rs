//! The chart rendered by the real helm: lint, every object and argument, the values schema.

use super::*;

#[test]
fn lints_renders_and_checks_its_values() {
    let chart = chart();
    let registry = registry();
    helm::helm(&["lint", "--strict", &chart, "--set", &registry], None)
        .expect("helm lint --strict");

    // Defaults: the manager with its RBAC, the add-on with its Placement; no scheduler (OCM's
    // runs on every hub), no CRDs, no scorer, no monitoring.
    let defaults = render(&[]);
    let k = kinds(&defaults);
    assert!(
        !k.iter().any(|(_, n)| n.contains("placement-scheduler")),
        "{k:?}"
    );
    for kind in [
        "ServiceMonitor",
        "PodMonitor",
        "PrometheusRule",
        "ConfigMap",
        "Service",
    ] {
        assert!(!k.iter().any(|(x, _)| x == kind), "{kind} in {k:?}");
    }
    // With the scheduler on: its Deployment and RBAC too.
    let docs = render(&["--set", "scheduler.enabled=true"]);
    let k = kinds(&docs);
    for want in [
        ("ClusterManagementAddOn", "resource-usage-collect"),
        ("Placement", "resource-usage-collect-global"),
        ("ManagedClusterSetBinding", "global"),
        ("Deployment", "placement-scheduler"),
        ("Deployment", "resource-usage-hub-manager"),
        ("ClusterRole", "open-cluster-management:placement-scheduler"),
        (
            "ClusterRole",
            "open-cluster-management:resource-usage-collect:manager",
        ),
        (
            "Role",
            "open-cluster-management:placement-scheduler:leader-election",
        ),
        // The agent's hub permission, bound per cluster by the manager, and the admission
        // policy that limits what the manager may create.
        (
            "ClusterRole",
            "open-cluster-management:resource-usage-collect:agent-hub",
        ),
        (
            "ValidatingAdmissionPolicy",
            "ocm-placement-resource-usage-collect-manager",
        ),
        (
            "ValidatingAdmissionPolicyBinding",
            "ocm-placement-resource-usage-collect-manager",
        ),
    ] {
        assert!(
            k.contains(&(want.0.to_owned(), want.1.to_owned())),
            "{want:?} in {k:?}"
        );
    }
    assert!(!k.iter().any(|(kind, _)| kind == "CustomResourceDefinition"));
    assert!(!k.iter().any(|(_, n)| n.contains("scorer")));
    let scheduler = args_of(&docs, "placement-scheduler");
    assert!(
        scheduler.iter().any(|x| x == "--max-score-validity=10m"),
        "{scheduler:?}"
    );
    // It takes over from OCM's placement controller only when told to.
    assert!(
        !scheduler.iter().any(|x| x == "--take-over"),
        "{scheduler:?}"
    );
    let take_over = render(&["--set", "scheduler.enabled=true,scheduler.takeOver=true"]);
    let scheduler = args_of(&take_over, "placement-scheduler");
    assert!(
        scheduler.iter().any(|x| x == "--take-over"),
        "{scheduler:?}"
    );
    let manager = args_of(&docs, "resource-usage-hub-manager");
    for a in [
        "manager",
        "--manage-cma=false",
        "--agent-image=registry.example.com/ocm-placement/resource-usage-agent:0.1.0",
        "--leader-elect=true",
    ] {
        assert!(manager.iter().any(|x| x == a), "{a} in {manager:?}");
    }
    let cma = docs
        .iter()
        .find(|d| d["kind"] == "ClusterManagementAddOn")
        .expect("cma");
    assert_eq!(
        cma["metadata"]["annotations"]["addon.open-cluster-management.io/lifecycle"],
        "self"
    );
    assert_eq!(
        cma["spec"]["installStrategy"]["placements"][0]["namespace"],
        "hub"
    );
    let placement = docs
        .iter()
        .find(|d| d["kind"] == "Placement")
        .expect("placement");
    let tolerated: Vec<&str> = placement["spec"]["tolerations"]
        .as_array()
        .expect("tolerations")
        .iter()
        .filter_map(|t| t["key"].as_str())
        .collect();
    assert_eq!(
        tolerated,
        [
            "cluster.open-cluster-management.io/unreachable",
            "cluster.open-cluster-management.io/unavailable"
        ]
    );
    // The RBAC is the files', with the release's names.
    let binding = docs
        .iter()
        .find(|d| {
            d["kind"] == "ClusterRoleBinding"
                && d["metadata"]["name"] == "open-cluster-management:placement-scheduler"
        })
        .expect("binding");
    assert_eq!(binding["subjects"][0]["namespace"], "hub");
    assert_eq!(binding["subjects"][0]["name"], "placement-scheduler");

    // Everything on: the scorer with its credentials, the debug Service, the CRDs.
    let docs = render(&[
        "--set",
        "scorer.enabled=true,scorer.prometheusURL=https://thanos:9091,scorer.tokenSecret=prom-token,scorer.caConfigMap=prom-ca",
        "--set",
        "scheduler.enabled=true,scheduler.debug.enabled=true,scheduler.debug.tlsSecret=debug-tls,installCRDs=true",
    ]);
    let scheduler = args_of(&docs, "placement-scheduler");
    for a in [
        "--debug-bind-address=0.0.0.0:9443",
        "--tls-cert-file=/etc/debug-tls/tls.crt",
        "--tls-key-file=/etc/debug-tls/tls.key",
    ] {
        assert!(scheduler.iter().any(|x| x == a), "{a} in {scheduler:?}");
    }
    let scorer = args_of(&docs, "resource-usage-hub-scorer");
    for a in [
        "scorer",
        "--prometheus-url=https://thanos:9091",
        "--prometheus-token-file=/etc/prometheus-auth/token",
        "--prometheus-ca-file=/etc/prometheus-ca/ca.crt",
        "--thanos-dedup=true",
        "--thanos-partial-response=true",
        "--refresh-period=60s",
        "--max-definitions=50",
    ] {
        assert!(scorer.iter().any(|x| x == a), "{a} in {scorer:?}");
    }
    // What the scorer computes is the ScoreDefinitions' (the built-in one rendered below): the
    // flags of the fixed queries are gone, and every definition is evaluated by default.
    for gone in [
        "--window",
        "--max-data-age",
        "--normalise",
        "--score-name",
        "--definition-selector",
    ] {
        assert!(
            !scorer.iter().any(|x| x.starts_with(gone)),
            "{gone} in {scorer:?}"
        );
    }
    assert!(kinds(&docs).contains(&("ScoreDefinition".into(), "resource-usage".into())));
    assert!(kinds(&docs).contains(&("Service".into(), "placement-scheduler-debug".into())));

    // The debug endpoint without a Secret: HTTPS with a self-signed certificate. Insecure:
    // plain HTTP on the pod's loopback, with no port or Service to reach it from outside.
    let self_signed = render(&[
        "--set",
        "scheduler.enabled=true,scheduler.debug.enabled=true",
    ]);
    let scheduler = args_of(&self_signed, "placement-scheduler");
    assert!(
        scheduler
            .iter()
            .any(|x| x == "--debug-bind-address=0.0.0.0:9443")
    );
    assert!(
        !scheduler
            .iter()
            .any(|x| x.starts_with("--tls-") || x.starts_with("--debug-insecure")),
        "{scheduler:?}"
    );
    let loopback = render(&[
        "--set",
        "scheduler.enabled=true,scheduler.debug.enabled=true,scheduler.debug.insecure=true",
    ]);
    let scheduler = args_of(&loopback, "placement-scheduler");
    for a in [
        "--debug-bind-address=127.0.0.1:9443",
        "--debug-insecure-loopback",
    ] {
        assert!(scheduler.iter().any(|x| x == a), "{a} in {scheduler:?}");
    }
    assert!(!kinds(&loopback).contains(&("Service".into(), "placement-scheduler-debug".into())));
    let pod = &loopback
        .iter()
        .find(|d| d["kind"] == "Deployment" && d["metadata"]["name"] == "placement-scheduler")
        .expect("Deployment placement-scheduler")["spec"]["template"]["spec"];
    assert!(
        !pod["containers"][0]["ports"]
            .as_array()
            .expect("ports")
            .iter()
            .any(|p| p["name"] == "debug"),
        "{pod}"
    );

    // The CRDs are crdgen's (plus helm's keep policy).
    let mut crds: Vec<Value> = docs
        .iter()
        .filter(|d| d["kind"] == "CustomResourceDefinition")
        .cloned()
        .collect();
    for c in &mut crds {
        let annotations = c["metadata"]["annotations"]
            .as_object_mut()
            .expect("annotations");
        assert_eq!(
            annotations.remove("helm.sh/resource-policy"),
            Some(Value::String("keep".into()))
        );
        if annotations.is_empty() {
            c["metadata"]
                .as_object_mut()
                .expect("metadata")
                .remove("annotations");
        }
    }
    crds.sort_by_key(|c| {
        c["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    });
    let mut want: Vec<Value> = ocm_api::crds::all()
        .iter()
        .map(|c| serde_json::to_value(c).expect("crd"))
        .collect();
    want.sort_by_key(|c| {
        c["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    });
    assert_eq!(
        crds, want,
        "charts/ocm-placement/files/crds.yaml is out of date: run tests/e2e/regen-crds.sh"
    );

    // The schema refuses what would not run (each with the registry, so that only the bad
    // value is wrong).
    for bad in [
        "logFormat=xml",
        "scorer.enabled=true",
        "addon.name=Not_A_Name",
        "leaderElection.leaseDuration=fifteen",
        "scheduler.replicas=-1",
        "unknownKey=1",
        "client.burst=4000000",
        // The templates' own checks.
        "scheduler.enabled=true,scheduler.debug.enabled=true,scheduler.debug.insecure=true,scheduler.debug.tlsSecret=t",
        "scheduler.enabled=true,scheduler.debug.enabled=true,scheduler.debug.port=8080",
        "leaderElection.enabled=false",
        "monitoring.serviceMonitor.enabled=true,monitoring.podMonitor.enabled=true",
        "scheduler.takeOver=yes",
        "monitoring.serviceMonitor.interval=often",
    ] {
        let out = helm::helm_output(
            &["template", "r", &chart, "--set", &registry, "--set", bad],
            None,
        )
        .expect("helm ran");
        assert!(!out.status.success(), "{bad} should be refused");
    }
}

/// The chart's own CRD (`crds/`, which helm installs before the templates) is crdgen's, and with
/// the scorer on the chart renders its built-in ScoreDefinition `resource-usage`, filled from
/// the scorer's values; `scorer.builtinDefinition=false` leaves it out and a
/// `scorer.definitionSelector` reaches the scorer.
#[test]
fn renders_the_builtin_score_definition_and_ships_its_crd() {
    let file = e2e::chart::chart_dir().join("crds/scoredefinitions.yaml");
    let text = std::fs::read_to_string(&file).expect("crds/scoredefinitions.yaml");
    assert!(text.starts_with("# "), "the file's comment header");
    let shipped: Vec<Value> = serde_saphyr::from_multiple::<Value>(&text)
        .expect("CRD YAML")
        .into_iter()
        .filter(|d| !d.is_null())
        .collect();
    let want: Vec<Value> = ocm_api::crds::ours()
        .iter()
        .map(|c| serde_json::to_value(c).expect("crd"))
        .collect();
    assert_eq!(
        shipped, want,
        "charts/ocm-placement/crds/scoredefinitions.yaml is out of date: run tests/e2e/regen-crds.sh"
    );
    // `helm template` prints crds/ only when asked; installCRDs is about upstream's kinds.
    let scorer = "scorer.enabled=true,scorer.prometheusURL=http://p:9090";
    let docs = render(&["--set", scorer, "--include-crds"]);
    assert!(
        kinds(&docs).contains(&(
            "CustomResourceDefinition".into(),
            "scoredefinitions.scoring.ocm-placement.io".into()
        )),
        "{:?}",
        kinds(&docs)
    );

    let definition = |set: &[&str]| -> ocm_api::scoring::ScoreDefinition {
        let mut args = vec!["--set", scorer];
        for s in set {
            args.extend(["--set", s]);
        }
        let docs = render(&args);
        let d = docs
            .iter()
            .find(|d| d["kind"] == "ScoreDefinition")
            .unwrap_or_else(|| panic!("a ScoreDefinition with {set:?}: {:?}", kinds(&docs)));
        serde_json::from_value(d.clone()).expect("parses as a ScoreDefinition")
    };
    let names = |d: &ocm_api::scoring::ScoreDefinition| -> Vec<String> {
        d.spec.scores.iter().map(|s| s.name.clone()).collect()
    };
    use ocm_api::scoring::v1alpha1::NormaliseType;

    // The defaults: absolute ranges 0..100 cores and 0..512Gi.
    let d = definition(&[]);
    assert_eq!(d.metadata.name.as_deref(), Some("resource-usage"));
    assert_eq!(d.spec.score_name, "resource-usage-score");
    assert_eq!(d.spec.refresh_period.as_deref(), Some("60s"));
    let freshness = d.spec.freshness.as_ref().expect("freshness");
    assert_eq!(freshness.max_age, "15m");
    assert!(freshness.expression.contains("[15m:1m]"), "{freshness:?}");
    assert_eq!(
        names(&d),
        [
            "cpuAvailable",
            "cpuClusterAvailable",
            "cpuNodeAvailable",
            "memAvailable",
            "memClusterAvailable",
            "memNodeAvailable"
        ]
    );
    for s in &d.spec.scores {
        assert_eq!(s.normalise.type_, NormaliseType::Range, "{}", s.name);
        assert_eq!(s.normalise.min.as_deref(), Some("0"), "{}", s.name);
        let max = if s.name.starts_with("cpu") {
            "100"
        } else {
            "512Gi"
        };
        assert_eq!(s.normalise.max.as_deref(), Some(max), "{}", s.name);
        assert!(s.expression.contains("[15m]"), "{}", s.name);
        // The scorer's trusted cluster label is filled in by the scorer, not the chart.
        assert!(s.expression.contains("{{LABEL}}"), "{}", s.name);
    }

    // Each value reaches the definition.
    let d = definition(&[
        "scorer.cpuMax=64,scorer.memoryMax=256Gi,scorer.window=10m,scorer.maxDataAge=5m",
        "scorer.scoreName=hub-usage,scorer.refreshPeriod=30s",
    ]);
    assert_eq!(d.spec.score_name, "hub-usage");
    assert_eq!(d.spec.refresh_period.as_deref(), Some("30s"));
    assert_eq!(
        d.spec.freshness.as_ref().map(|f| f.max_age.as_str()),
        Some("5m")
    );
    for s in &d.spec.scores {
        let max = if s.name.starts_with("cpu") {
            "64"
        } else {
            "256Gi"
        };
        assert_eq!(s.normalise.max.as_deref(), Some(max), "{}", s.name);
        assert!(s.expression.contains("[10m]"), "{}", s.name);
    }
    let d = definition(&["scorer.normalise=fleet"]);
    for s in &d.spec.scores {
        assert_eq!(s.normalise.type_, NormaliseType::MinMax, "{}", s.name);
        assert_eq!((&s.normalise.min, &s.normalise.max), (&None, &None));
    }

    // Without the built-in definition: none, the scorer alone; a selector reaches its flags.
    let docs = render(&[
        "--set",
        scorer,
        "--set",
        "scorer.builtinDefinition=false,scorer.definitionSelector=team=a,scorer.maxDefinitions=7",
    ]);
    assert!(!docs.iter().any(|d| d["kind"] == "ScoreDefinition"));
    let args = args_of(&docs, "resource-usage-hub-scorer");
    for a in ["--definition-selector=team=a", "--max-definitions=7"] {
        assert!(args.iter().any(|x| x == a), "{a} in {args:?}");
    }
    // Without the scorer: no definition.
    assert!(!render(&[]).iter().any(|d| d["kind"] == "ScoreDefinition"));
}

/// Without `image.registry` (no images are published) no component renders, and the message
/// says how to build them; with no component (the CRDs alone) nothing needs an image.
#[test]
fn refuses_to_render_a_component_without_a_registry() {
    let chart = chart();
    for set in [
        "logLevel=info",
        "manager.enabled=false,scheduler.enabled=true",
        "manager.enabled=false,scorer.enabled=true,scorer.prometheusURL=http://p:9090",
    ] {
        let out =
            helm::helm_output(&["template", "r", &chart, "--set", set], None).expect("helm ran");
        let err = helm::stderr(&out);
        assert!(
            !out.status.success()
                && err.contains("image.registry is empty")
                && err.contains("images/build.sh --push <registry>"),
            "{set}: {err}"
        );
    }
    let crds = e2e::chart::render(
        &e2e::chart::chart_dir(),
        "hub",
        &["--set", "manager.enabled=false,installCRDs=true"],
    )
    .expect("the CRDs alone need no registry");
    assert!(
        crds.iter().all(|d| d["kind"] == "CustomResourceDefinition"),
        "{:?}",
        kinds(&crds)
    );
}

/// `ci/production-values.yaml`: each Deployment carries each setting; a PodDisruptionBudget per
/// component selects exactly its pods; the extra flags come last; digests make the image
/// references. The defaults carry none of it, but the budget of a component with several
/// replicas.
#[test]
fn renders_the_production_settings_of_each_component() {
    let chart = chart();
    let values = production_values();
    helm::helm(&["lint", "--strict", &chart, "-f", &values], None)
        .expect("helm lint --strict, production values");
    let docs = e2e::chart::render(&e2e::chart::chart_dir(), "hub", &["-f", &values])
        .expect("helm template, production values");
    let want: Value = serde_saphyr::from_str(&std::fs::read_to_string(&values).expect("values"))
        .expect("values YAML");
    let digest = |n: &str| {
        want[n]["imageDigest"]
            .as_str()
            .expect("imageDigest")
            .to_owned()
    };
    for (key, name, image) in [
        ("scheduler", "placement-scheduler", "placement-scheduler"),
        (
            "manager",
            "resource-usage-hub-manager",
            "resource-usage-hub",
        ),
        ("scorer", "resource-usage-hub-scorer", "resource-usage-hub"),
    ] {
        let v = &want[key];
        let d = deployment(&docs, name);
        let pod = &d["spec"]["template"];
        let spec = &pod["spec"];
        let selector = json!({"app.kubernetes.io/instance": "r", "app.kubernetes.io/name": name});
        assert_eq!(d["spec"]["selector"]["matchLabels"], selector, "{name}");
        assert_eq!(
            spec["containers"][0]["image"],
            format!("{REGISTRY}/{image}@{}", digest(key)),
            "{name}"
        );
        for field in ["nodeSelector", "tolerations", "priorityClassName"] {
            assert_eq!(spec[field], v[field], "{name}: {field}");
        }
        assert_eq!(spec["affinity"], v["affinity"], "{name}: affinity");
        // Each given constraint, with this component's pods selected when it names none.
        let spread = spec["topologySpreadConstraints"].as_array();
        let given = v["topologySpreadConstraints"].as_array();
        assert_eq!(
            spread.map(Vec::len),
            given.map(Vec::len),
            "{name}: {spread:?}"
        );
        for (got, given) in spread
            .into_iter()
            .flatten()
            .zip(given.into_iter().flatten())
        {
            let mut given = given.clone();
            given["labelSelector"] = json!({"matchLabels": selector});
            assert_eq!(got, &given, "{name}");
        }
        // The pods' own labels and annotations; the selector labels stay.
        let labels = pod["metadata"]["labels"].as_object().expect("labels");
        for (k, val) in selector.as_object().expect("selector") {
            assert_eq!(labels.get(k), Some(val), "{name}: {labels:?}");
        }
        for (k, val) in v["podLabels"].as_object().into_iter().flatten() {
            assert_eq!(labels.get(k), Some(val), "{name}: {labels:?}");
        }
        assert_eq!(
            pod["metadata"]["annotations"], v["podAnnotations"],
            "{name}: annotations"
        );
        // The extra flags, last and in order.
        let args = args_of(&docs, name);
        let extra: Vec<String> = v["extraArgs"]
            .as_array()
            .expect("extraArgs")
            .iter()
            .filter_map(|a| a.as_str().map(str::to_owned))
            .collect();
        assert!(!extra.is_empty(), "{name}");
        assert!(
            args.ends_with(&extra),
            "{name}: {args:?} ends with {extra:?}"
        );
        // A budget over exactly these pods.
        let pdb = docs
            .iter()
            .find(|p| p["kind"] == "PodDisruptionBudget" && p["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("PodDisruptionBudget {name} in {:?}", kinds(&docs)));
        assert_eq!(pdb["apiVersion"], "policy/v1");
        assert_eq!(pdb["spec"]["selector"]["matchLabels"], selector, "{name}");
        assert_eq!(pdb["spec"]["unhealthyPodEvictionPolicy"], "AlwaysAllow");
        let max = &v["podDisruptionBudget"]["maxUnavailable"];
        assert_eq!(
            pdb["spec"]["maxUnavailable"],
            if max.is_null() { json!(1) } else { max.clone() },
            "{name}"
        );
    }

    // The defaults: none of it, and a budget only where more than one replica runs.
    let docs = render(&[
        "--set",
        "scheduler.enabled=true,scorer.enabled=true,scorer.prometheusURL=http://p:9090",
    ]);
    for name in [
        "placement-scheduler",
        "resource-usage-hub-manager",
        "resource-usage-hub-scorer",
    ] {
        let spec = &deployment(&docs, name)["spec"]["template"]["spec"];
        for field in [
            "nodeSelector",
            "tolerations",
            "affinity",
            "topologySpreadConstraints",
            "priorityClassName",
        ] {
            assert!(spec[field].is_null(), "{name}: {field} {}", spec[field]);
        }
        assert!(
            spec["containers"][0]["image"]
                .as_str()
                .is_some_and(|i| i.ends_with(":0.1.0")),
            "{name}"
        );
    }
    let budgets: Vec<String> = kinds(&docs)
        .into_iter()
        .filter(|(k, _)| k == "PodDisruptionBudget")
        .map(|(_, n)| n)
        .collect();
    assert_eq!(
        budgets,
        ["placement-scheduler", "resource-usage-hub-manager"]
    );
    let docs = render(&["--set", "manager.podDisruptionBudget.enabled=false"]);
    assert!(!kinds(&docs).iter().any(|(k, _)| k == "PodDisruptionBudget"));

    // The extra flags the binaries would refuse: one the chart renders, one given twice.
    let registry = registry();
    for (set, flag) in [
        (
            "scheduler.enabled=true,scheduler.extraArgs={--resync-period=5m}",
            "--resync-period",
        ),
        (
            "scheduler.enabled=true,scheduler.takeOver=true,scheduler.extraArgs={--take-over}",
            "--take-over",
        ),
        ("manager.extraArgs={--manage-cma=true}", "--manage-cma"),
        ("manager.extraArgs={--leader-elect=false}", "--leader-elect"),
        (
            "scorer.enabled=true,scorer.prometheusURL=http://p:9090,scorer.extraArgs={--prometheus-url=http://q:9090}",
            "--prometheus-url",
        ),
        (
            "manager.extraArgs={--resync-period=1m,--resync-period=2m}",
            "--resync-period",
        ),
    ] {
        let out = helm::helm_output(
            &["template", "r", &chart, "--set", &registry, "--set", set],
            None,
        )
        .expect("helm ran");
        let err = helm::stderr(&out);
        assert!(
            !out.status.success() && err.contains("extraArgs") && err.contains(flag),
            "{set}: {err}"
        );
    }

    // Wrong types, from a values file as an operator writes one, and from --set-json.
    let dir = std::env::temp_dir().join(format!("chart-bad-values-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    for (n, (yaml, path)) in [
        (
            "manager: {nodeSelector: [control-plane]}",
            "/manager/nodeSelector",
        ),
        (
            "scheduler: {tolerations: {key: x}}",
            "/scheduler/tolerations",
        ),
        ("scorer: {extraArgs: --workers=2}", "/scorer/extraArgs"),
        ("scorer: {extraArgs: [workers=2]}", "/scorer/extraArgs/0"),
        ("manager: {podLabels: {tier: 1}}", "/manager/podLabels/tier"),
        ("manager: {podAnnotations: [a]}", "/manager/podAnnotations"),
        (
            "scheduler: {priorityClassName: 10}",
            "/scheduler/priorityClassName",
        ),
        (
            "scheduler: {topologySpreadConstraints: [{maxSkew: 1}]}",
            "/scheduler/topologySpreadConstraints/0",
        ),
        ("manager: {imageDigest: latest}", "/manager/imageDigest"),
        (
            "manager: {podDisruptionBudget: {maxUnavailable: half}}",
            "/manager/podDisruptionBudget/maxUnavailable",
        ),
        (
            "manager: {podDisruptionBudget: {enabled: \"yes\"}}",
            "/manager/podDisruptionBudget/enabled",
        ),
        (
            "monitoring: {runbookBaseURL: \"\"}",
            "/monitoring/runbookBaseURL",
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let file = dir.join(format!("bad-{n}.yaml"));
        std::fs::write(&file, yaml).expect("write values");
        let file = file.display().to_string();
        let out = helm::helm_output(
            &["template", "r", &chart, "--set", &registry, "-f", &file],
            None,
        )
        .expect("helm ran");
        let err = helm::stderr(&out);
        assert!(
            !out.status.success() && err.contains("values don't meet") && err.contains(path),
            "{yaml}: {err}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The values of an earlier chart (its values.yaml, without this chart's newer values), as
/// `helm upgrade --reuse-values` hands them to this chart's templates: they render, with this
/// chart's defaults where a value is missing.
#[test]
fn renders_with_the_values_of_an_earlier_chart() {
    let dir = std::env::temp_dir().join(format!("chart-old-values-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    copy_dir(&e2e::chart::chart_dir(), &dir);
    std::fs::copy(
        e2e::chart::fixture("chart-29155e1").join("values.yaml"),
        dir.join("values.yaml"),
    )
    .expect("the earlier values");
    let chart = dir.display().to_string();
    // NOTES.txt too: `install --dry-run=client` renders it.
    let out = helm::helm(
        &[
            "install",
            "r",
            &chart,
            "--namespace",
            "hub",
            "--dry-run=client",
            "--set",
            "scorer.enabled=true,scorer.prometheusURL=http://p:9090",
            "--set-json",
            "monitoring={\"prometheusRule\": {\"enabled\": true}}",
        ],
        None,
    )
    .expect("the templates render the earlier values");
    let text = helm::stdout(&out);
    let manifest = text.split_once("NOTES:").map_or(text.as_str(), |(m, _)| m);
    let docs: Vec<Value> = serde_saphyr::from_multiple::<Value>(
        manifest
            .split_once("MANIFEST:")
            .map_or(manifest, |(_, m)| m),
    )
    .expect("YAML")
    .into_iter()
    .filter(|d| !d.is_null())
    .collect();
    let k = kinds(&docs);
    for want in [
        ("Deployment", "placement-scheduler"),
        ("PodDisruptionBudget", "placement-scheduler"),
        ("PodDisruptionBudget", "resource-usage-hub-manager"),
        ("PrometheusRule", "ocm-placement"),
    ] {
        assert!(
            k.contains(&(want.0.to_owned(), want.1.to_owned())),
            "{want:?} in {k:?}"
        );
    }
    // The scorer's values this chart added take its defaults: every flag has a value, and
    // the built-in definition is shipped with the default maxima.
    let scorer = args_of(&docs, "resource-usage-hub-scorer");
    assert!(
        scorer.iter().any(|x| x == "--max-definitions=50"),
        "{scorer:?}"
    );
    assert!(!scorer.iter().any(|x| x.ends_with('=')), "{scorer:?}");
    let definition: ocm_api::scoring::ScoreDefinition = serde_json::from_value(
        docs.iter()
            .find(|d| d["kind"] == "ScoreDefinition")
            .unwrap_or_else(|| panic!("the built-in definition in {k:?}"))
            .clone(),
    )
    .expect("a ScoreDefinition");
    assert!(
        definition
            .spec
            .scores
            .iter()
            .all(|s| s.normalise.max.as_deref()
                == Some(if s.name.starts_with("cpu") {
                    "100"
                } else {
                    "512Gi"
                })),
        "{definition:?}"
    );
    let rule = docs
        .iter()
        .find(|d| d["kind"] == "PrometheusRule")
        .expect("rule");
    assert_eq!(
        rule["spec"]["groups"][1]["rules"][0]["annotations"]["runbook_url"],
        "docs/troubleshooting.md#ocmplacementnoleader"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).expect("dir");
    for entry in std::fs::read_dir(from).expect("read dir") {
        let entry = entry.expect("entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("type").is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy");
        }
    }
}
