//! What the local fleet needs built before it starts, and building it: the control plane
//! (etcd, kube-apiserver, the OCM CRDs and, for real clusters, kube-controller-manager) with
//! `tests/control-plane/build.sh`, upstream OCM's agents with `tests/ocm/build.sh`, and for the
//! Thanos mode Prometheus and Thanos. Each is built once into the versioned cache
//! (`$OCM_PLACEMENT_CACHE`, else `~/.cache/ocm-placement`) and found there by testenv after.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use testenv::paths;

use crate::fleet::Error;

/// Which fleet: what it runs decides what it needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Real clusters through upstream OCM's agents (`Fleet::start_real`).
    Real,
    /// Clusters simulated on the hub (`Fleet::start`).
    Simulated,
    /// Simulated clusters, Prometheus and Thanos instead of the agents.
    Thanos,
}

/// OCM's binaries the real fleet runs (testenv's `ocm_agents`).
const OCM_BINARIES: [&str; 3] = ["registration-operator", "registration", "addon"];

/// Minutes each build took here from an empty cache, with Go's module and build caches empty
/// too (so the time includes the module downloads), on 2 cores shared with other work:
/// etcd 67 s, kube-apiserver 358 s, then kube-controller-manager 98 s (it shares
/// kube-apiserver's compiled packages), the CRDs under a second, OCM's three binaries 296 s.
/// The estimate printed before a build.
fn minutes(component: &str) -> f64 {
    match component {
        "etcd" => 1.1,
        "kube-apiserver" => 6.0,
        "kube-controller-manager" => 1.6,
        "crds" => 0.1,
        "ocm" => 5.0,
        // Not measured: an apt download, and a Go build of about kube-apiserver's size.
        "prometheus" => 0.5,
        "thanos" => 6.0,
        _ => 1.0,
    }
}

/// One build script to run, and why.
#[derive(Clone, Debug, PartialEq)]
pub struct Build {
    /// What it builds, for the progress line ("kube-apiserver, etcd").
    pub what: String,
    /// The script, relative to the repository root, and its arguments.
    pub script: &'static str,
    pub args: Vec<String>,
    /// About how long it takes, in minutes (measured here, see `minutes`).
    pub minutes: f64,
}

impl Build {
    /// The command to run from the repository root.
    pub fn command_line(&self) -> String {
        std::iter::once(self.script.to_owned())
            .chain(self.args.iter().cloned())
            .collect::<Vec<_>>()
            .join(" ")
    }

    fn about(&self) -> String {
        if self.minutes < 1.0 {
            "under a minute".to_owned()
        } else {
            format!("about {:.0} min", self.minutes.round())
        }
    }
}

/// The repository root (this crate is tests/e2e).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn dir_has_files(dir: &Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|mut d| d.next().is_some())
}

/// What `mode` needs that the cache does not hold, as the builds that make it.
pub fn missing(mode: Mode) -> Vec<Build> {
    let mut control_plane = Vec::new();
    if !paths::etcd().is_file() {
        control_plane.push("etcd");
    }
    if !paths::kube_apiserver().is_file() {
        control_plane.push("kube-apiserver");
    }
    if mode == Mode::Real && !paths::kube_controller_manager().is_file() {
        control_plane.push("kube-controller-manager");
    }
    if !dir_has_files(&paths::upstream_crds_dir()) {
        control_plane.push("crds");
    }
    let mut builds = Vec::new();
    if !control_plane.is_empty() {
        builds.push(Build {
            what: control_plane
                .iter()
                .map(|c| if *c == "crds" { "the OCM CRDs" } else { c })
                .collect::<Vec<_>>()
                .join(", "),
            script: "tests/control-plane/build.sh",
            args: control_plane.iter().map(|c| (*c).to_owned()).collect(),
            minutes: control_plane.iter().map(|c| minutes(c)).sum(),
        });
    }
    if mode == Mode::Real {
        let ocm: Vec<String> = OCM_BINARIES
            .into_iter()
            .filter(|b| !paths::ocm_binary(b).is_file())
            .map(str::to_owned)
            .collect();
        if !ocm.is_empty() {
            builds.push(Build {
                what: format!("upstream OCM's {}", ocm.join(", ")),
                script: "tests/ocm/build.sh",
                args: ocm,
                minutes: minutes("ocm"),
            });
        }
    }
    if mode == Mode::Thanos {
        if testenv::prometheus::binary().is_err() {
            builds.push(Build {
                what: "Prometheus (Debian's package)".to_owned(),
                script: "tests/prometheus/build.sh",
                args: Vec::new(),
                minutes: minutes("prometheus"),
            });
        }
        if testenv::thanos::binary().is_err() {
            builds.push(Build {
                what: "Thanos".to_owned(),
                script: "tests/thanos/build.sh",
                args: Vec::new(),
                minutes: minutes("thanos"),
            });
        }
    }
    builds
}

/// Where the builds land.
pub fn cache_root() -> PathBuf {
    let control_plane = paths::cache_root();
    control_plane
        .parent()
        .map_or_else(|| control_plane.clone(), Path::to_path_buf)
}

/// The lines that say what is missing and the commands that build it.
pub fn report(builds: &[Build]) -> String {
    let mut s = format!("missing from the cache {}:\n", cache_root().display());
    for b in builds {
        s.push_str(&format!("  {} ({} to build)\n", b.what, b.about()));
    }
    s.push_str("build with, from the repository root:\n");
    for b in builds {
        s.push_str(&format!("  {}\n", b.command_line()));
    }
    s
}

/// Runs each build script, printing a progress line per build and the scripts' own "building"
/// and "built" lines; their whole output goes to `log_dir/build-<n>.log`. A failure names the
/// command to run by hand and ends with the log's last lines.
pub fn build(builds: &[Build], log_dir: &Path) -> Result<(), Error> {
    std::fs::create_dir_all(log_dir).map_err(|e| format!("create {}: {e}", log_dir.display()))?;
    let root = repo_root();
    for (n, b) in builds.iter().enumerate() {
        eprintln!(
            "building {} (first run only, {} on 2 cores)...",
            b.what,
            b.about()
        );
        let log_path = log_dir.join(format!("build-{n}.log"));
        let mut log = std::fs::File::create(&log_path)
            .map_err(|e| format!("create {}: {e}", log_path.display()))?;
        let (reader, writer) = std::io::pipe().map_err(|e| format!("pipe: {e}"))?;
        let started = Instant::now();
        let mut child = {
            let mut cmd = Command::new("bash");
            cmd.arg(root.join(b.script))
                .args(&b.args)
                .current_dir(&root)
                .stdin(std::process::Stdio::null())
                .stdout(writer.try_clone().map_err(|e| format!("pipe: {e}"))?)
                .stderr(writer);
            cmd.spawn()
                .map_err(|e| format!("run {}: {e}", b.command_line()))?
            // `cmd` and its ends of the pipe are dropped here: the reader sees the end of the
            // output when the script exits.
        };
        let mut tail: std::collections::VecDeque<String> = std::collections::VecDeque::new();
        for line in BufReader::new(reader).lines() {
            let Ok(line) = line else { break };
            let _ = writeln!(log, "{line}");
            if ["building ", "built ", "unpacked ", "testenv: ", "tests/"]
                .iter()
                .any(|p| line.starts_with(p))
            {
                eprintln!("  {line}");
            }
            tail.push_back(line);
            if tail.len() > 20 {
                tail.pop_front();
            }
        }
        let status = child
            .wait()
            .map_err(|e| format!("wait for {}: {e}", b.command_line()))?;
        if !status.success() {
            let tail: Vec<String> = tail.into_iter().collect();
            return Err(format!(
                "{} failed ({status}); its output is in {}, ending:\n{}\nrun it by hand from the repository root: {}",
                b.command_line(),
                log_path.display(),
                tail.join("\n"),
                b.command_line()
            )
            .into());
        }
        eprintln!("  done in {:.0} s", started.elapsed().as_secs_f64());
    }
    Ok(())
}
