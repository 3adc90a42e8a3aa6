//! Upstream OCM's own placement integration suite (`test/integration/placement` of
//! open-cluster-management-io/ocm at the pinned `OCM_VERSION`, its specs unchanged) against our
//! `placement-scheduler` binary. `tests/ocm/placement-suite.sh` builds the suite (cached) with
//! upstream's `RunControllerManager` replaced by one that starts our binary against the suite's
//! apiserver, adds our specs of the debug endpoint (HTTPS, ServiceAccount tokens, a Placement a
//! Go client marshalled), and runs the unchanged build once with upstream's own controller as
//! the control. Here every spec must pass against our binary, and every spec the control ran
//! must have run; the table printed says how each ended, beside the control.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A spec of a Ginkgo JSON report: its full name and how it ended.
struct Spec {
    name: String,
    state: String,
    failure: Option<String>,
}

/// The `It` specs of a Ginkgo JSON report (`-ginkgo.json-report`).
fn specs(report: &Path) -> Vec<Spec> {
    let text = std::fs::read_to_string(report)
        .unwrap_or_else(|e| panic!("reading {}: {e}", report.display()));
    let suites: Value = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{} is not a Ginkgo report: {e}", report.display()));
    let mut out = Vec::new();
    for suite in suites.as_array().into_iter().flatten() {
        for spec in suite["SpecReports"].as_array().into_iter().flatten() {
            let str_of = |v: &Value| v.as_str().unwrap_or_default().to_owned();
            let failure = spec.get("Failure").filter(|f| !f.is_null()).map(|f| {
                format!(
                    "{} at {}:{}",
                    str_of(&f["Message"]),
                    str_of(&f["Location"]["FileName"]),
                    f["Location"]["LineNumber"]
                )
            });
            if spec["LeafNodeType"] != "It" {
                // BeforeSuite and AfterSuite: only their failures matter.
                if spec["State"] != "passed" {
                    out.push(Spec {
                        name: str_of(&spec["LeafNodeType"]),
                        state: str_of(&spec["State"]),
                        failure,
                    });
                }
                continue;
            }
            let mut name: Vec<String> = spec["ContainerHierarchyTexts"]
                .as_array()
                .into_iter()
                .flatten()
                .map(str_of)
                .collect();
            name.push(str_of(&spec["LeafNodeText"]));
            out.push(Spec {
                name: name.join(" / "),
                state: str_of(&spec["State"]),
                failure,
            });
        }
    }
    out
}

#[test]
fn upstream_placement_suite_passes_against_our_binary() {
    let built = Command::new(repo().join("tests/ocm/placement-suite.sh"))
        .stderr(Stdio::inherit())
        .output()
        .expect("running tests/ocm/placement-suite.sh");
    assert!(
        built.status.success(),
        "tests/ocm/placement-suite.sh failed"
    );
    let suite = PathBuf::from(
        String::from_utf8_lossy(&built.stdout)
            .lines()
            .last()
            .expect("tests/ocm/placement-suite.sh printed no directory")
            .trim(),
    );
    let scheduler = e2e::fleet::binaries(false)
        .expect("building placement-scheduler")
        .join("placement-scheduler");

    let work = std::env::temp_dir().join(format!("upstream-placement-{}", std::process::id()));
    let logs = work.join("logs");
    std::fs::create_dir_all(&logs).expect("creating the log directory");
    let report = work.join("report.json");
    let run = Command::new(suite.join("ours.test"))
        .current_dir(suite.join("run"))
        .env("KUBEBUILDER_ASSETS", suite.join("assets"))
        .env("OCM_PLACEMENT_SCHEDULER", &scheduler)
        .env("OCM_PLACEMENT_SUITE_LOGS", &logs)
        .arg("-ginkgo.no-color")
        .arg("-ginkgo.timeout=30m")
        .arg(format!("-ginkgo.json-report={}", report.display()))
        .output()
        .expect("running the suite");
    let ours = specs(&report);
    let control: BTreeMap<String, String> = specs(&suite.join("control.json"))
        .into_iter()
        .map(|s| (s.name, s.state))
        .collect();

    println!("| spec | our binary | upstream's controller (control) |");
    println!("| --- | --- | --- |");
    for s in &ours {
        let c = control
            .get(&s.name)
            .map_or("not in upstream's suite", String::as_str);
        println!("| {} | {} | {c} |", s.name, s.state);
    }
    let count = |state: &str| ours.iter().filter(|s| s.state == state).count();
    println!(
        "{} specs: {} passed, {} failed, {} skipped",
        ours.len(),
        count("passed"),
        ours.len() - count("passed") - count("skipped"),
        count("skipped")
    );

    let failed: Vec<&Spec> = ours.iter().filter(|s| s.state != "passed").collect();
    let missing: Vec<&String> = control
        .keys()
        .filter(|name| !ours.iter().any(|s| &s.name == *name))
        .collect();
    let debug_specs = ours
        .iter()
        .filter(|s| {
            s.name
                .starts_with("DebugService against placement-scheduler")
        })
        .count();
    if !failed.is_empty() || !missing.is_empty() || !run.status.success() || debug_specs < 6 {
        for s in &failed {
            println!("FAILED {}: {}", s.name, s.failure.as_deref().unwrap_or("-"));
        }
        println!("{}", String::from_utf8_lossy(&run.stdout));
        eprintln!("{}", String::from_utf8_lossy(&run.stderr));
        panic!(
            "upstream's placement suite against {}: {} not passed, {} of the control's specs not run \
             ({missing:?}), {debug_specs} debug specs, exit {}; our binary's logs: {}",
            scheduler.display(),
            failed.len(),
            missing.len(),
            run.status,
            logs.display()
        );
    }
    std::fs::remove_dir_all(&work).ok();
}
