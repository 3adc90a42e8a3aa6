//! The README's values table, the alert rules under promtool, the monitoring objects selecting
//! each component's metrics port, and the notes an install prints.

use super::*;

#[test]
fn the_readme_values_table_is_current() {
    let chart = e2e::chart::chart_dir();
    let inputs = e2e::chart_readme::Inputs::read(&chart).expect("the chart's files");
    let want = inputs.generate().unwrap_or_else(|e| {
        panic!(
            "charts/ocm-placement: {e}\n(fix values.schema.json or values.yaml, then run `{}`)",
            e2e::chart_readme::COMMAND
        )
    });
    assert!(
        want == inputs.readme,
        "charts/ocm-placement/README.md is out of date: run `{}`",
        e2e::chart_readme::COMMAND
    );
}

/// `promtool check rules` on the chart's rules file, and `promtool test rules` with the alerts'
/// unit tests (fixtures/prometheus-rules.test.yaml): each fires on trouble, not on health.
#[test]
fn the_rules_pass_promtool() {
    let rules = e2e::chart::chart_dir().join("files/prometheus-rules.yaml");
    let tests = e2e::chart::fixture("prometheus-rules.test.yaml");
    let promtool = e2e::chart::promtool().unwrap_or_else(|e| panic!("{e}"));
    for (verb, file) in [("check", &rules), ("test", &tests)] {
        let out = std::process::Command::new(&promtool)
            .args([verb, "rules"])
            .arg(file)
            .output()
            .expect("run promtool");
        assert!(
            out.status.success(),
            "promtool {verb} rules {}:\n{}{}",
            file.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// With monitoring on, each enabled component gets a monitor that selects its pods (through a
/// Service, or directly) on the port that serves /metrics; the rules and the dashboard are the
/// files' own.
#[test]
fn monitoring_selects_each_component_on_its_metrics_port() {
    let all = "scheduler.enabled=true,scorer.enabled=true,scorer.prometheusURL=http://p:9090";
    let components = [
        "placement-scheduler",
        "resource-usage-hub-manager",
        "resource-usage-hub-scorer",
    ];
    let matches = |selector: &Value, labels: &Value| {
        selector
            .as_object()
            .is_some_and(|s| !s.is_empty() && s.iter().all(|(k, v)| &labels[k] == v))
    };
    let deployment = |docs: &[Value], name: &str| -> Value {
        docs.iter()
            .find(|d| d["kind"] == "Deployment" && d["metadata"]["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("Deployment {name}"))
    };
    // The container port a name or number refers to, and that it is the metrics address's.
    let serves_metrics = |d: &Value, port: &Value| {
        let container = &d["spec"]["template"]["spec"]["containers"][0];
        let number = container["ports"]
            .as_array()
            .expect("ports")
            .iter()
            .find(|p| &p["name"] == port || &p["containerPort"] == port)
            .and_then(|p| p["containerPort"].as_u64());
        let bind = container["args"]
            .as_array()
            .expect("args")
            .iter()
            .filter_map(Value::as_str)
            .find_map(|a| a.strip_prefix("--metrics-bind-address="))
            .and_then(|a| a.rsplit(':').next())
            .and_then(|p| p.parse::<u64>().ok());
        number.is_some() && number == bind
    };

    // ServiceMonitors: Service -> pods -> port.
    let docs = render(&[
        "--set",
        all,
        "--set",
        "monitoring.serviceMonitor.enabled=true,monitoring.serviceMonitor.labels.release=kp,monitoring.prometheusRule.enabled=true,monitoring.dashboard.enabled=true",
    ]);
    for name in components {
        let d = deployment(&docs, name);
        let pod_labels = &d["spec"]["template"]["metadata"]["labels"];
        let monitor = docs
            .iter()
            .find(|m| m["kind"] == "ServiceMonitor" && m["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("ServiceMonitor {name}"));
        assert_eq!(monitor["apiVersion"], "monitoring.coreos.com/v1");
        assert_eq!(monitor["metadata"]["labels"]["release"], "kp");
        assert_eq!(monitor["spec"]["namespaceSelector"]["matchNames"][0], "hub");
        let services: Vec<&Value> = docs
            .iter()
            .filter(|s| {
                s["kind"] == "Service"
                    && s["metadata"]["namespace"] == "hub"
                    && matches(
                        &monitor["spec"]["selector"]["matchLabels"],
                        &s["metadata"]["labels"],
                    )
            })
            .collect();
        assert_eq!(
            services.len(),
            1,
            "{name}: one Service selected: {services:?}"
        );
        let service = services[0];
        assert!(
            matches(&service["spec"]["selector"], pod_labels),
            "{name}: {service}"
        );
        let endpoint = &monitor["spec"]["endpoints"][0];
        assert_eq!(endpoint["path"], "/metrics");
        let port = service["spec"]["ports"]
            .as_array()
            .expect("ports")
            .iter()
            .find(|p| p["name"] == endpoint["port"])
            .unwrap_or_else(|| panic!("{name}: the Service has the monitor's port"));
        assert!(serves_metrics(&d, &port["targetPort"]), "{name}: {port}");
        // Only the component's own pods.
        for other in components.iter().filter(|o| **o != name) {
            let o = deployment(&docs, other);
            assert!(!matches(
                &service["spec"]["selector"],
                &o["spec"]["template"]["metadata"]["labels"]
            ));
        }
    }
    // The rules and the dashboard, unchanged from the files (the rules' runbook links are the
    // default's).
    let files = e2e::chart::chart_dir().join("files");
    let rule = docs
        .iter()
        .find(|d| d["kind"] == "PrometheusRule")
        .expect("PrometheusRule");
    let want: Value = serde_saphyr::from_str(
        &std::fs::read_to_string(files.join("prometheus-rules.yaml")).expect("rules"),
    )
    .expect("rules YAML");
    assert_eq!(rule["spec"], want);
    let dashboard = docs
        .iter()
        .find(|d| d["kind"] == "ConfigMap" && d["metadata"]["name"] == "ocm-placement-dashboard")
        .expect("dashboard ConfigMap");
    assert_eq!(dashboard["metadata"]["labels"]["grafana_dashboard"], "1");
    let shipped: Value = serde_json::from_str(
        dashboard["data"]["ocm-placement.json"]
            .as_str()
            .expect("json"),
    )
    .expect("dashboard JSON");
    let file: Value = serde_json::from_str(
        &std::fs::read_to_string(files.join("grafana-dashboard.json")).expect("dashboard"),
    )
    .expect("dashboard JSON");
    assert_eq!(shipped, file);

    // PodMonitors: pods -> port, and no Services.
    let docs = render(&["--set", all, "--set", "monitoring.podMonitor.enabled=true"]);
    assert!(
        !kinds(&docs)
            .iter()
            .any(|(k, n)| k == "Service" && n.ends_with("-metrics"))
    );
    for name in components {
        let d = deployment(&docs, name);
        let monitor = docs
            .iter()
            .find(|m| m["kind"] == "PodMonitor" && m["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("PodMonitor {name}"));
        assert!(matches(
            &monitor["spec"]["selector"]["matchLabels"],
            &d["spec"]["template"]["metadata"]["labels"]
        ));
        let endpoint = &monitor["spec"]["podMetricsEndpoints"][0];
        assert!(serves_metrics(&d, &endpoint["port"]), "{name}: {endpoint}");
    }
    // Disabled components get no monitor.
    let docs = render(&["--set", "monitoring.podMonitor.enabled=true"]);
    let monitors: Vec<String> = kinds(&docs)
        .into_iter()
        .filter(|(k, _)| k == "PodMonitor")
        .map(|(_, n)| n)
        .collect();
    assert_eq!(monitors, ["resource-usage-hub-manager"]);
}

/// Each alert's `runbook_url` is `<monitoring.runbookBaseURL>#<its name in lower case>` (the
/// anchor of its heading in docs/troubleshooting.md): in the rules file, the default's; in the
/// PrometheusRule, the value's. Nothing else of the rules changes.
#[test]
fn each_alert_links_its_runbook() {
    let files = e2e::chart::chart_dir().join("files");
    let file: Value = serde_saphyr::from_str(
        &std::fs::read_to_string(files.join("prometheus-rules.yaml")).expect("rules"),
    )
    .expect("rules YAML");
    let alerts = |rules: &Value| -> Vec<(String, Value)> {
        rules["groups"]
            .as_array()
            .expect("groups")
            .iter()
            .flat_map(|g| g["rules"].as_array().expect("rules").iter())
            .filter_map(|r| Some((r["alert"].as_str()?.to_owned(), r["annotations"].clone())))
            .collect()
    };
    let in_file = alerts(&file);
    assert_eq!(in_file.len(), 9, "{in_file:?}");
    for (alert, annotations) in &in_file {
        assert_eq!(
            annotations["runbook_url"],
            format!("docs/troubleshooting.md#{}", alert.to_lowercase()),
            "{alert}"
        );
    }
    let base = "https://git.example.com/platform/ocm-placement/blob/main/docs/troubleshooting.md";
    let docs = render(&[
        "--set",
        &format!("monitoring.prometheusRule.enabled=true,monitoring.runbookBaseURL={base}"),
    ]);
    let rule = docs
        .iter()
        .find(|d| d["kind"] == "PrometheusRule")
        .expect("PrometheusRule");
    let rendered = alerts(&rule["spec"]);
    assert_eq!(rendered.len(), in_file.len());
    for (alert, annotations) in &rendered {
        assert_eq!(
            annotations["runbook_url"],
            format!("{base}#{}", alert.to_lowercase()),
            "{alert}"
        );
    }
    // The rest as in the file.
    let mut want = file.clone();
    for g in want["groups"].as_array_mut().expect("groups") {
        for r in g["rules"].as_array_mut().expect("rules") {
            if let Some(alert) = r["alert"].as_str().map(str::to_lowercase) {
                r["annotations"]["runbook_url"] = json!(format!("{base}#{alert}"));
            }
        }
    }
    assert_eq!(rule["spec"], want);
}

/// The README's alert table names every alert once, each with its `for:` duration as in the
/// rules file.
#[test]
fn the_readme_gives_each_alert_its_for_duration() {
    let chart = e2e::chart::chart_dir();
    let rules: Value = serde_saphyr::from_str(
        &std::fs::read_to_string(chart.join("files/prometheus-rules.yaml")).expect("rules"),
    )
    .expect("rules YAML");
    let readme = std::fs::read_to_string(chart.join("README.md")).expect("README");
    let table: Vec<Vec<String>> = readme
        .lines()
        .skip_while(|l| !l.starts_with("| Alert |"))
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .map(|l| {
            l.trim_matches('|')
                .split(" | ")
                .map(|c| c.trim().to_owned())
                .collect()
        })
        .collect();
    assert!(!table.is_empty(), "no alert table in the README");
    let mut documented = BTreeMap::new();
    for row in &table {
        let duration = row.last().expect("cells").trim_matches('`').to_owned();
        for name in row[0].split(", ") {
            assert!(
                documented
                    .insert(name.trim_matches('`').to_owned(), duration.clone())
                    .is_none(),
                "{name} twice in the table"
            );
        }
    }
    let mut actual = BTreeMap::new();
    for g in rules["groups"].as_array().expect("groups") {
        for r in g["rules"].as_array().expect("rules") {
            if let Some(alert) = r["alert"].as_str() {
                actual.insert(alert.to_owned(), r["for"].as_str().expect("for").to_owned());
            }
        }
    }
    assert_eq!(
        documented, actual,
        "the README's alert table against the rules file"
    );
}

/// The notes an install prints (`helm install --dry-run=client` renders them without a hub).
fn notes(set: &str) -> String {
    let chart = chart();
    let registry = registry();
    let out = helm::helm(
        &[
            "install",
            "r",
            &chart,
            "--namespace",
            "hub",
            "--dry-run=client",
            "--set",
            &registry,
            "--set",
            set,
        ],
        None,
    )
    .expect("helm install --dry-run=client");
    let text = helm::stdout(&out);
    text.split_once("NOTES:")
        .map(|(_, n)| n.to_owned())
        .unwrap_or_else(|| panic!("no NOTES in {text}"))
}

#[test]
fn the_notes_say_what_was_installed_and_warn_about_a_second_scheduler() {
    let chart = chart();
    helm::helm(
        &[
            "lint",
            "--strict",
            &chart,
            "--set",
            &registry(),
            "--set",
            "scheduler.enabled=true,monitoring.serviceMonitor.enabled=true,monitoring.prometheusRule.enabled=true,monitoring.dashboard.enabled=true",
        ],
        None,
    )
    .expect("helm lint --strict, everything on");

    let defaults = notes("logLevel=info");
    for want in [
        "ClusterManagementAddOn resource-usage-collect",
        "hub/resource-usage-collect-global",
        "kubectl get clustermanagementaddon resource-usage-collect",
        "kubectl get addonplacementscores -A --field-selector metadata.name=resource-usage-score",
        "kubectl get placementdecisions -A",
        "placement-scheduler explain NAMESPACE/NAME",
        "kubectl placement explain NAMESPACE/NAME",
    ] {
        assert!(
            defaults.contains(want),
            "{want:?} in the notes:\n{defaults}"
        );
    }
    assert!(!defaults.contains("WARNING"), "{defaults}");

    let ours = notes("scheduler.enabled=true");
    assert!(
        ours.contains("WARNING: this release runs its own placement scheduler"),
        "{ours}"
    );
    assert!(ours.contains("spec.placementImagePullSpec"), "{ours}");
    assert!(ours.contains("refuses to start"), "{ours}");
    let take_over = notes("scheduler.enabled=true,scheduler.takeOver=true");
    assert!(
        take_over.contains("scheduler.takeOver is set"),
        "{take_over}"
    );
}
