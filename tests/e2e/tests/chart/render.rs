//! The chart rendered by the real helm: lint, every object and argument, the values schema.

use super::*;

#[test]
fn lints_renders_and_checks_its_values() {
    let chart = chart();
    helm::helm(&["lint", "--strict", &chart], None).expect("helm lint --strict");

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
        "--agent-image=quay.io/ocm-placement/resource-usage-agent:0.1.0",
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
    ] {
        assert!(scorer.iter().any(|x| x == a), "{a} in {scorer:?}");
    }
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

    // The schema refuses what would not run.
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
        let out =
            helm::helm_output(&["template", "r", &chart, "--set", bad], None).expect("helm ran");
        assert!(!out.status.success(), "{bad} should be refused");
    }
}
