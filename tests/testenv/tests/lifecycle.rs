//! The control plane's own lifecycle: two in one process stay apart, and no etcd or
//! kube-apiserver outlives the test that started it, whether that test passes, panics or its
//! process is killed.

#![allow(clippy::unwrap_used)] // in a test, a failed unwrap is a failed test

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::Api;
use kube::api::{ObjectMeta, PostParams};
use testenv::{ControlPlane, Options, process::is_running};

const CHILD_ENV: &str = "TESTENV_LIFECYCLE_CHILD_REPORT";

#[tokio::test]
async fn two_control_planes_in_one_process_do_not_collide() {
    let (a, b) = tokio::join!(
        ControlPlane::start(Options::default()),
        ControlPlane::start(Options::default())
    );
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_ne!(a.server(), b.server());
    assert_ne!(a.dir(), b.dir());

    // The same namespace and object name in both, with different data: each sees its own.
    for (cp, value) in [(&a, "from-a"), (&b, "from-b")] {
        let client = cp.client().unwrap();
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some("same-name".into()),
                ..Default::default()
            },
            ..Default::default()
        };
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .unwrap();
        let cm = ConfigMap {
            metadata: ObjectMeta {
                name: Some("who".into()),
                ..Default::default()
            },
            data: Some([("value".to_string(), value.to_string())].into()),
            ..Default::default()
        };
        Api::<ConfigMap>::namespaced(client, "same-name")
            .create(&PostParams::default(), &cm)
            .await
            .unwrap();
    }
    for (cp, value) in [(&a, "from-a"), (&b, "from-b")] {
        let cm = Api::<ConfigMap>::namespaced(cp.client().unwrap(), "same-name")
            .get("who")
            .await
            .unwrap();
        assert_eq!(cm.data.unwrap()["value"], value);
    }

    // Dropping one leaves the other serving.
    let [etcd_a, api_a] = a.pids();
    let dir_a = a.dir().to_path_buf();
    drop(a);
    assert!(!is_running(etcd_a) && !is_running(api_a));
    assert!(!dir_a.exists());
    Api::<Namespace>::all(b.client().unwrap())
        .get("same-name")
        .await
        .unwrap();
}

/// What a child test process reports: the PIDs it started and the directory it used.
fn write_report(cp: &ControlPlane) {
    let Ok(path) = std::env::var(CHILD_ENV) else {
        return;
    };
    let [etcd, api] = cp.pids();
    // Written beside it, then renamed: the report appears complete or not at all.
    let partial = format!("{path}.partial");
    std::fs::write(&partial, format!("{etcd}\n{api}\n{}\n", cp.dir().display())).unwrap();
    std::fs::rename(&partial, &path).unwrap();
}

fn read_report(path: &Path) -> (Vec<u32>, PathBuf) {
    let text = std::fs::read_to_string(path).expect("the child test wrote no report");
    let lines: Vec<&str> = text.lines().collect();
    (
        vec![lines[0].parse().unwrap(), lines[1].parse().unwrap()],
        PathBuf::from(lines[2]),
    )
}

/// Runs one of the `child_*` tests below in a new process of this test binary.
fn spawn_child(test: &str, report: &Path) -> std::process::Child {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            test,
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, report)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap()
}

fn assert_all_gone(pids: &[u32], dir: Option<&Path>) {
    // Killed processes are reaped asynchronously: poll with a deadline.
    let deadline = Instant::now() + Duration::from_secs(20);
    while pids.iter().any(|&p| is_running(p)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    for &pid in pids {
        assert!(!is_running(pid), "process {pid} outlived its test");
    }
    if let Some(dir) = dir {
        assert!(!dir.exists(), "{} was left behind", dir.display());
    }
}

fn report_path(name: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!("testenv-{name}-{}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    path
}

#[test]
fn a_panicking_test_with_the_shared_control_plane_leaves_no_process() {
    let report = report_path("shared-panic");
    let status = spawn_child("child_panics_with_shared", &report)
        .wait()
        .unwrap();
    assert!(!status.success(), "the child test was meant to fail");
    let (pids, dir) = read_report(&report);
    assert_all_gone(&pids, Some(&dir));
}

#[test]
fn a_panicking_test_with_its_own_control_plane_leaves_no_process() {
    let report = report_path("owned-panic");
    let status = spawn_child("child_panics_with_owned", &report)
        .wait()
        .unwrap();
    assert!(!status.success(), "the child test was meant to fail");
    let (pids, dir) = read_report(&report);
    assert_all_gone(&pids, Some(&dir));
}

#[test]
fn a_killed_test_process_leaves_no_process() {
    let report = report_path("killed");
    let mut child = spawn_child("child_waits_to_be_killed", &report);
    let deadline = Instant::now() + Duration::from_secs(180);
    while !report.exists() {
        assert!(
            Instant::now() < deadline,
            "the child never started its control plane"
        );
        assert!(
            child.try_wait().unwrap().is_none(),
            "the child ended on its own"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let (pids, _dir) = read_report(&report);
    child.kill().unwrap(); // SIGKILL: no unwinding, no exit hooks; only PDEATHSIG is left
    child.wait().unwrap();
    // The directory of a killed process is removed by the next start, not by the kernel.
    assert_all_gone(&pids, None);
}

#[tokio::test]
#[ignore = "run by a_panicking_test_with_the_shared_control_plane_leaves_no_process"]
async fn child_panics_with_shared() {
    let cp = testenv::shared().await;
    write_report(cp);
    panic!("deliberate panic with the shared control plane running");
}

#[tokio::test]
#[ignore = "run by a_panicking_test_with_its_own_control_plane_leaves_no_process"]
async fn child_panics_with_owned() {
    let cp = ControlPlane::start(Options::default()).await.unwrap();
    write_report(&cp);
    panic!("deliberate panic with an owned control plane running");
}

#[tokio::test]
#[ignore = "run by a_killed_test_process_leaves_no_process"]
async fn child_waits_to_be_killed() {
    let cp = ControlPlane::start(Options::default()).await.unwrap();
    write_report(&cp);
    std::future::pending::<()>().await;
}
