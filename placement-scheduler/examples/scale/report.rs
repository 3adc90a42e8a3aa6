//! The markdown report: number formats, the machine, the tree, the header and summary table.

use super::*;

pub(crate) fn secs(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}

pub(crate) fn ms(d: Duration) -> String {
    format!("{:.0} ms", d.as_secs_f64() * 1000.0)
}

pub(crate) fn mb(bytes: u64) -> String {
    format!("{:.0} MB", bytes as f64 / 1e6)
}

pub(crate) fn num(v: f64) -> String {
    let n = v.round() as i64;
    let s = n.abs().to_string();
    let mut out = String::new();
    for (i, ch) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    if n < 0 { format!("-{out}") } else { out }
}

pub(crate) fn cpus() -> u32 {
    std::thread::available_parallelism().map_or(1, |n| u32::try_from(n.get()).unwrap_or(1))
}

pub(crate) fn machine() -> String {
    let cpus = cpus();
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| {
                l.strip_prefix("model name")
                    .map(|v| v.trim_start_matches([' ', '\t', ':']).to_owned())
            })
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let mem = proc_meminfo_gb();
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    format!(
        "{cpus} CPUs ({model}), {mem:.0} GB RAM, Linux {}",
        kernel.trim()
    )
}

pub(crate) fn proc_meminfo_gb() -> f64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| {
                l.strip_prefix("MemTotal:")
                    .and_then(|v| v.split_whitespace().next())
                    .and_then(|v| v.parse::<f64>().ok())
            })
        })
        .map_or(0.0, |kb| kb / 1024.0 / 1024.0)
}

/// The commit the controller was built from, `-dirty` with uncommitted changes.
pub(crate) fn git_rev() -> String {
    Command::new("git")
        .args(["describe", "--always", "--dirty", "--abbrev=7"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map_or_else(|| "unknown".into(), |s| s.trim().to_owned())
}

pub(crate) fn render_report(
    args: &Args,
    started: jiff::Timestamp,
    summary: &[String],
    sections: &[String],
    rev: &str,
) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "## Placement controller scale run\n");
    let _ = writeln!(
        s,
        "{} UTC; {}; kube-apiserver {}, etcd {} (testenv, `--unsafe-no-fsync`){}; controller built from {}, run with `--workers={} --client-qps={} --client-burst={} --event-debounce={}{}{}`, leader election off.\n",
        started.strftime("%Y-%m-%d %H:%M"),
        machine(),
        testenv::paths::version("KUBE_VERSION").unwrap_or("?"),
        testenv::paths::version("ETCD_VERSION").unwrap_or("?"),
        if args.ocm_1_2_crds {
            ", OCM 1.2's CRDs (no score fields)"
        } else {
            ""
        },
        rev,
        args.workers,
        args.client_qps,
        args.client_burst,
        if args.event_debounce.is_empty() {
            "(its default)"
        } else {
            &args.event_debounce
        },
        if args.controller_args.is_empty() {
            ""
        } else {
            " "
        },
        args.controller_args.join(" "),
    );
    if args.controller != Which::Ours {
        let _ = writeln!(
            s,
            "Upstream: OCM's `placement controller` {} (tests/ocm/build.sh), run with `--disable-leader-election --kube-api-qps={} --kube-api-burst={}{}{}`, watching every namespace.\n",
            testenv::paths::version("OCM_VERSION").unwrap_or("?"),
            args.client_qps,
            args.client_burst,
            if args.upstream_args.is_empty() {
                ""
            } else {
                " "
            },
            args.upstream_args.join(" "),
        );
    }
    if !summary.is_empty() {
        let _ = writeln!(
            s,
            "| placements × clusters | create placements | first Placement → all decided | → settled | controller CPU (% of wall) | peak RSS | apiserver / etcd CPU | controller writes | controller requests | other processes' CPU |"
        );
        let _ = writeln!(
            s,
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
        );
        for row in summary {
            let _ = writeln!(s, "{row}");
        }
        let _ = writeln!(
            s,
            "\nCPU, writes and requests are counted from the first Placement created until all are decided; \"settled\" is the last controller write before {} without any (passes that write nothing do not count); the last column is the CPU that other processes on the machine used meanwhile, as a share of all its CPUs (contention that skews the figures).\n",
            secs(args.settle)
        );
    }
    for sec in sections {
        let _ = writeln!(s, "{sec}");
    }
    let _ = writeln!(
        s,
        "Targets (reported, not asserted): 10,000 × 1,000 limited by the apiserver's write rate, controller CPU < 25% of wall time; peak RSS < 300 MB; reaction p99 < 1 s."
    );
    s
}
