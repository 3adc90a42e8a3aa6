//! The container images (images/Containerfile, built by images/build.sh with Debian's buildah;
//! the script re-uses an unchanged build, so after tests/run.sh's own call this costs seconds):
//! each binary runs INSIDE its image (`buildah run --isolation chroot --network host`) against
//! the test apiserver, the images are minimal and non-root, and the chart names exactly the
//! images the script tags.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::Client;
use kube::api::{Api, ListParams};
use kube::config::Kubeconfig;
use ocm_api::work::v1::ManifestWork;
use ocm_api::{AddOnPlacementScore, PlacementDecision};
use serde_json::{Value, json};
use testenv::{eventually, helm};

const DEADLINE: Duration = Duration::from_secs(90);
const NAMES: [&str; 3] = [
    "placement-scheduler",
    "resource-usage-hub",
    "resource-usage-agent",
];
/// Where the test's kubeconfig and CA appear inside a container.
const CONFIG: &str = "/config";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn output(cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn stdout_lines(out: &Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

/// images/build.sh with `args`.
fn build_script(args: &[&str]) -> Output {
    output(Command::new(repo().join("images/build.sh")).args(args))
}

/// buildah with the script's storage (its driver).
fn buildah_command() -> Command {
    let driver = std::env::var("OCM_IMAGES_STORAGE_DRIVER").unwrap_or_else(|_| "vfs".into());
    let mut cmd = Command::new("buildah");
    cmd.args(["--storage-driver", &driver]);
    cmd
}

/// buildah with `args`: its stdout.
fn buildah(args: &[&str]) -> String {
    let out = output(buildah_command().args(args));
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// The three images (`<registry>/<name>:<tag>`, in [`NAMES`] order), built once per test binary.
fn images() -> &'static [String] {
    static IMAGES: OnceLock<Vec<String>> = OnceLock::new();
    IMAGES.get_or_init(|| {
        let start = std::time::Instant::now();
        let out = build_script(&[]);
        Container::remove_leftovers();
        // The script's closing lines: each image and its size, for the test log.
        eprintln!(
            "images/build.sh took {:?}:\n{}",
            start.elapsed(),
            String::from_utf8_lossy(&out.stdout)
        );
        stdout_lines(&build_script(&["--list"]))
    })
}

/// A working container of `image`, removed on drop.
struct Container(String);

/// The prefix of this test's container names; `<prefix><pid>-<n>` names the test process.
const CONTAINER_PREFIX: &str = "ocm-placement-images-test-";

impl Container {
    fn from(image: &str) -> Container {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let name = format!("{CONTAINER_PREFIX}{}-{n}", std::process::id());
        Container(buildah(&["from", "--pull-never", "--name", &name, image]))
    }

    /// Removes what a killed run of this test left (its process is gone), so that the script
    /// can remove the images they hold.
    fn remove_leftovers() {
        let names = buildah(&["containers", "--format", "{{.ContainerName}}"]);
        for name in names.lines() {
            let pid = name
                .strip_prefix(CONTAINER_PREFIX)
                .and_then(|rest| rest.split('-').next());
            if let Some(pid) = pid
                && !Path::new("/proc").join(pid).exists()
            {
                let _ = buildah_command().args(["rm", name]).output();
            }
        }
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        let _ = buildah_command().args(["rm", &self.0]).output();
    }
}

#[test]
fn the_chart_names_the_images_the_script_tags() {
    let chart = repo().join("charts/ocm-placement").display().to_string();
    // The chart has no default registry (no images are published); the script's default
    // names the images for this machine (localhost/...).
    let cases: [(&[&str], &[&str]); 2] = [
        (&["--set", "image.registry=localhost/ocm-placement"], &[]),
        (
            &[
                "--set",
                "image.registry=registry.example.com/me",
                "--set",
                "image.tag=1.2.3",
            ],
            &["--registry", "registry.example.com/me", "--tag", "1.2.3"],
        ),
    ];
    for (set, script) in cases {
        let mut args = vec![
            "template",
            "r",
            chart.as_str(),
            "--namespace",
            "hub",
            "--set",
            "scheduler.enabled=true",
            "--set",
            "scorer.enabled=true",
            "--set",
            "scorer.prometheusURL=http://prometheus:9090",
        ];
        args.extend_from_slice(set);
        let out = helm::helm(&args, None).expect("helm template");
        let docs = serde_saphyr::from_multiple::<Value>(&helm::stdout(&out)).expect("YAML");
        // Every container image of every Deployment, and the agent image the manager ships.
        let mut rendered = BTreeMap::new();
        for d in docs.iter().filter(|d| d["kind"] == "Deployment") {
            for c in d["spec"]["template"]["spec"]["containers"]
                .as_array()
                .expect("containers")
            {
                let image = c["image"].as_str().expect("image").to_owned();
                rendered.insert(image.clone(), d["metadata"]["name"].clone());
                for a in c["args"].as_array().into_iter().flatten() {
                    if let Some(agent) = a.as_str().and_then(|a| a.strip_prefix("--agent-image=")) {
                        rendered.insert(agent.to_owned(), json!("agent"));
                    }
                }
            }
        }
        let mut tagged = stdout_lines(&build_script(&[&["--list"], script].concat()));
        tagged.sort();
        assert_eq!(
            rendered.keys().cloned().collect::<Vec<_>>(),
            tagged,
            "the chart's images ({rendered:?}) with {set:?}"
        );
    }

    // Without a registry the chart renders no component, and says how to get images.
    let out = helm::helm_output(&["template", "r", chart.as_str()], None).expect("helm");
    assert!(
        !out.status.success() && helm::stderr(&out).contains("images/build.sh --push <registry>"),
        "{}",
        helm::stderr(&out)
    );

    // A value that would make a reference the script never tags is refused, not rendered.
    for bad in [
        "image.registry=registry.example.com/me/",
        "image.registry=registry.example.com/Me",
        "image.tag=v1:2",
        "scheduler.image=Placement-Scheduler",
    ] {
        let out = helm::helm_output(&["template", "r", chart.as_str(), "--set", bad], None)
            .expect("helm");
        assert!(
            !out.status.success() && helm::stderr(&out).contains("values don't meet"),
            "{bad}: {}",
            helm::stderr(&out)
        );
    }
}

#[test]
fn the_images_are_minimal_non_root_and_labelled() {
    let version = String::from_utf8_lossy(
        &std::fs::read(repo().join("charts/ocm-placement/Chart.yaml")).expect("Chart.yaml"),
    )
    .lines()
    .find_map(|l| l.strip_prefix("appVersion:"))
    .map(|v| v.trim().trim_matches('"').to_owned())
    .expect("appVersion");
    for (name, image) in NAMES.iter().zip(images()) {
        assert!(image.ends_with(&format!("/{name}:{version}")), "{image}");
        let inspect: Value =
            serde_json::from_str(&buildah(&["inspect", "--type", "image", image])).expect("JSON");
        let config = &inspect["OCIv1"]["config"];
        assert_eq!(config["User"], "65532:65532", "{image}");
        assert_eq!(
            config["Entrypoint"],
            json!([format!("/usr/local/bin/{name}")]),
            "{image}"
        );
        let labels = &config["Labels"];
        let label = |k: &str| {
            labels[format!("org.opencontainers.image.{k}")]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        };
        assert_eq!(label("title"), *name);
        assert_eq!(label("version"), version);
        assert_eq!(label("licenses"), "Apache-2.0");
        assert!(label("source").starts_with("https://"), "{labels}");
        assert!(!label("description").is_empty(), "{labels}");

        // The whole file system: the binary and the CA bundle, nothing else (no shell, no libc).
        let c = Container::from(image);
        let root = PathBuf::from(buildah(&["mount", &c.0]));
        let mut files = Vec::new();
        walk(&root, &root, &mut files);
        let _ = buildah(&["umount", &c.0]);
        assert_eq!(
            files,
            [
                "etc/ssl/certs/ca-certificates.crt".to_owned(),
                format!("usr/local/bin/{name}"),
            ],
            "{image}"
        );

        // What OCM's cluster-manager runs when the ClusterManager's placement image is this
        // one: the entrypoint with its Deployment's args, `/placement controller ...`.
        if *name == "placement-scheduler" {
            let entrypoint = format!("/usr/local/bin/{name}");
            let help = buildah(&[
                "run",
                "--isolation",
                "chroot",
                &c.0,
                "--",
                &entrypoint,
                "/placement",
                "controller",
                "--help",
            ]);
            assert!(help.contains("Usage: placement controller"), "{help}");
        }
    }
}

/// Every non-directory under `dir`, relative to `root`, sorted; the CA bundle's certificates
/// are counted on the way.
fn walk(root: &Path, dir: &Path, files: &mut Vec<String>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .expect("read_dir")
        .map(|e| e.expect("entry").path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() && !p.is_symlink() {
            walk(root, &p, files);
            continue;
        }
        let rel = p
            .strip_prefix(root)
            .expect("under root")
            .display()
            .to_string();
        if rel == "etc/ssl/certs/ca-certificates.crt" {
            let pem = std::fs::read_to_string(&p).expect("the CA bundle");
            let n = pem.matches("-----BEGIN CERTIFICATE-----").count();
            assert!(n > 100, "Debian's CA bundle has well over 100 roots: {n}");
        }
        files.push(rel);
    }
}

/// A binary running in its image (`buildah run`), in its own process group, which is killed on
/// drop (buildah's chroot runner and the binary under it).
struct Running {
    name: String,
    child: Child,
    _container: Container,
    log: PathBuf,
}

impl Running {
    fn start(image: &str, config: &Path, logs: &Path, args: &[&str]) -> Running {
        let container = Container::from(image);
        let name = image
            .rsplit('/')
            .next()
            .and_then(|n| n.split(':').next())
            .unwrap_or(image)
            .to_owned();
        let log = logs.join(format!("{name}.log"));
        let file = std::fs::File::create(&log).expect("log file");
        let entrypoint = format!("/usr/local/bin/{name}");
        let run = buildah_command()
            .args(["run", "--isolation", "chroot"])
            .args(["--network", "host", "--env", "RUST_LOG=info"])
            .arg("--volume")
            .arg(format!("{}:{CONFIG}:ro", config.display()))
            .args([container.0.as_str(), "--", entrypoint.as_str()])
            .args(args)
            .get_args()
            .map(|a| a.to_owned())
            .collect::<Vec<_>>();
        // Killing buildah leaves the binary running (re-parented to init), so the whole group
        // goes: on drop, and, through a shell that gets SIGTERM when this test process dies
        // (setpriv --pdeathsig), also when the test is killed outright.
        let child = Command::new("setpriv")
            .args(["--pdeathsig", "TERM", "--", "sh", "-c"])
            .arg(r#"trap 'kill -KILL 0' TERM; "$@" & wait $!"#)
            .args(["sh", "buildah"])
            .args(run)
            .stdout(Stdio::null())
            .stderr(file)
            .process_group(0)
            .spawn()
            .expect("setpriv sh buildah run");
        Running {
            name,
            child,
            _container: container,
            log,
        }
    }

    /// Panics (with the log) when the process has exited.
    fn check(&mut self) {
        if let Ok(Some(status)) = self.child.try_wait() {
            panic!(
                "{} exited in its image: {status}\n{}",
                self.name,
                std::fs::read_to_string(&self.log).unwrap_or_default()
            );
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let group = format!("-{}", self.child.id());
        let _ = Command::new("kill").args(["-KILL", "--", &group]).status();
        let _ = self.child.wait();
    }
}

/// The test's kubeconfig for a container: the admin's, with the CA at its path under
/// [`CONFIG`], in a directory the image's user (65532) can read.
fn container_config(cp: &testenv::ControlPlane, dir: &Path) {
    std::fs::create_dir_all(dir).expect("config dir");
    let mut kc = Kubeconfig::from_yaml(&cp.kubeconfig(None)).expect("kubeconfig");
    for c in &mut kc.clusters {
        if let Some(cluster) = c.cluster.as_mut() {
            cluster.certificate_authority = Some(format!("{CONFIG}/ca.crt"));
        }
    }
    let files = [
        ("ca.crt", cp.ca_pem().expect("CA")),
        // JSON is YAML: what a kubeconfig reader takes.
        (
            "kubeconfig",
            serde_json::to_string(&kc).expect("kubeconfig JSON"),
        ),
    ];
    for (f, text) in files {
        let p = dir.join(f);
        std::fs::write(&p, text).expect("write");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    }
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).expect("chmod");
}

async fn apply(client: &Client, obj: Value, ns: &str) {
    testenv::apply(client, &obj, ns).await.expect("apply");
}

#[tokio::test]
async fn each_binary_runs_in_its_image_against_the_hub() {
    let images = images();
    let cp = testenv::shared().await;
    let client = cp.client().expect("client");
    let dir = std::env::temp_dir().join(format!("images-test-{}", std::process::id()));
    let config = dir.join("config");
    container_config(cp, &config);
    let kubeconfig = format!("--kubeconfig={CONFIG}/kubeconfig");

    // A cluster (its namespace has its name) in a cluster set bound to the placements'
    // namespace, with one ready node the agent counts.
    let ns = testenv::namespace(&client, "images")
        .await
        .expect("namespace");
    let cluster = testenv::namespace(&client, "images-cluster")
        .await
        .expect("namespace");
    let set = format!("{ns}-set");
    let label = e2e::fleet::CLUSTER_LABEL;
    apply(&client, json!({"apiVersion": "cluster.open-cluster-management.io/v1beta2", "kind": "ManagedClusterSet",
        "metadata": {"name": set}, "spec": {"clusterSelector": {"selectorType": "ExclusiveClusterSetLabel"}}}), &ns).await;
    apply(&client, json!({"apiVersion": "cluster.open-cluster-management.io/v1beta2", "kind": "ManagedClusterSetBinding",
        "metadata": {"name": set, "namespace": ns}, "spec": {"clusterSet": set}}), &ns).await;
    apply(&client, json!({"apiVersion": "cluster.open-cluster-management.io/v1", "kind": "ManagedCluster",
        "metadata": {"name": cluster, "labels": {"cluster.open-cluster-management.io/clusterset": set}},
        "spec": {"hubAcceptsClient": true}}), &ns).await;
    // 8 free cores over two nodes carrying the cluster label, as the fleet makes them.
    e2e::agents::add_nodes(&client, &cluster, 8)
        .await
        .expect("nodes");
    let agent_ns = format!("{cluster}-agent");
    apply(
        &client,
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": agent_ns}}),
        &ns,
    )
    .await;

    let logs = dir.join("logs");
    std::fs::create_dir_all(&logs).expect("logs dir");
    let addon = format!("{ns}-addon");
    let mut running = vec![
        Running::start(
            &images[0],
            &config,
            &logs,
            &[
                "controller",
                "--leader-elect=false",
                "--debug-bind-address=",
                "--metrics-bind-address=127.0.0.1:0",
                &kubeconfig,
            ],
        ),
        Running::start(
            &images[1],
            &config,
            &logs,
            &[
                "manager",
                "--leader-elect=false",
                &format!("--addon-name={addon}"),
                &format!("--agent-image={}", images[2]),
                "--metrics-bind-address=127.0.0.1:0",
                &kubeconfig,
            ],
        ),
        Running::start(
            &images[2],
            &config,
            &logs,
            &[
                "run",
                &format!("--hub-kubeconfig={CONFIG}/kubeconfig"),
                &kubeconfig,
                &format!("--cluster-name={cluster}"),
                &format!("--addon-namespace={agent_ns}"),
                &format!("--node-selector={label}={cluster}"),
                "--cpu-range=0:16",
                "--metrics-bind-address=127.0.0.1:0",
            ],
        ),
    ];

    // The scheduler decides.
    apply(
        &client,
        json!({"apiVersion": "cluster.open-cluster-management.io/v1beta1", "kind": "Placement",
        "metadata": {"name": "in-image", "namespace": ns},
        "spec": {"numberOfClusters": 1, "clusterSets": [set]}}),
        &ns,
    )
    .await;
    let decisions = Api::<PlacementDecision>::namespaced(client.clone(), &ns);
    eventually("the scheduler's decision", DEADLINE, || async {
        let list = decisions.list(&Default::default()).await.ok()?;
        list.items
            .iter()
            .flat_map(|d| d.status.iter().flat_map(|s| s.decisions.iter()))
            .any(|d| d.cluster_name == cluster)
            .then_some(())
    })
    .await;

    // The agent scores its cluster: 8 free cores on a 0:16 range is the middle, 0.
    let scores = Api::<AddOnPlacementScore>::namespaced(client.clone(), &cluster);
    eventually("the agent's score", DEADLINE, || async {
        let s = scores.get_opt("resource-usage-score").await.ok()??;
        s.status?
            .scores
            .iter()
            .any(|i| i.name == "cpuAvailable" && i.value == 0)
            .then_some(())
    })
    .await;

    // The manager installs the add-on on the cluster: the ManifestWork that runs this agent image.
    apply(&client, json!({"apiVersion": "addon.open-cluster-management.io/v1alpha1", "kind": "ManagedClusterAddOn",
        "metadata": {"name": addon, "namespace": cluster}, "spec": {}}), &cluster).await;
    let works = Api::<ManifestWork>::namespaced(client.clone(), &cluster);
    let work = eventually("the manager's ManifestWork", DEADLINE, || async {
        works
            .get_opt(&format!("addon-{addon}-deploy-0"))
            .await
            .ok()?
    })
    .await;
    let manifests = serde_json::to_string(&work.spec).expect("JSON");
    assert!(
        manifests.contains(&format!("\"image\":\"{}\"", images[2])),
        "the work runs the agent image: {manifests}"
    );

    for r in &mut running {
        r.check();
    }
    drop(running);
    let _ = Api::<Node>::all(client.clone())
        .delete_collection(
            &Default::default(),
            &ListParams::default().labels(&format!("{label}={cluster}")),
        )
        .await;
    let _ = std::fs::remove_dir_all(&dir);
}
