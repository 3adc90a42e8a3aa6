//! The docs tests: what the Markdown says that a program can check is checked here, so that a
//! changed flag, a renamed heading, a new metric or alert, or a README command that stopped
//! working fails a test instead of misleading a reader. Each test lists every offending item
//! as `file:line: what`, then the rule and how to satisfy it.
//!
//! - [`links_and_anchors_resolve`]: every relative link and `#anchor` of every Markdown file
//!   (`git ls-files '*.md'` plus untracked, not ignored ones; [`SKIPPED`] aside) resolves, the
//!   anchor as GitHub makes it (`e2e::docs::Slugger`) or an explicit `<a id>`/`<a name>`.
//!   External links are not fetched.
//! - [`no_citations_outside_the_repository`]: no path outside the repository, no internal
//!   tracker or seed numbers, no `.md` document the repository does not hold.
//! - [`flags_and_environment_variables_the_docs_name_exist`] and
//!   [`every_flag_and_environment_variable_is_documented`]: the long flags and environment
//!   variables in code spans, code blocks, tables and plain text against the `--help` of every
//!   binary ([`programs`]), and back.
//! - [`readme_commands_are_run_or_marked`]: every shell block of [`RUN_OR_MARK`] is either
//!   marked `<!-- not run by the tests: <reason> -->` or made of commands a test runs
//!   ([`RUN_HERE`], [`RUN_BY_TESTS`]).
//! - [`every_alert_has_a_troubleshooting_heading`]: the chart's alerts in
//!   `docs/troubleshooting.md`.
//! - [`every_metric_is_documented_with_its_type`] and [`metrics_the_docs_name_exist`]: the
//!   metrics the binaries register (found in their source, checked against what they serve on
//!   `/metrics`; see [`metrics`]) against `docs/metrics.md`, and every metric name in the docs
//!   against them.
//!
//! The binaries are built as the other end-to-end tests build them (`e2e::fleet::binaries`,
//! the harness examples with one `cargo build --workspace --examples`); the README's cheap
//! commands run verbatim with their own `CARGO_TARGET_DIR` (see [`run_here`]).

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use e2e::docs::{
    Help, Markdown, commands, env_references, flag_of, is_env_name, render_inline, shell_lines,
};
use serde_json::Value;

/// Markdown not checked: test inputs, not documentation.
const SKIPPED: &[&str] = &["tests/e2e/fixtures/"];

/// The files whose shell blocks must be run by a test or marked (see
/// [`readme_commands_are_run_or_marked`]).
const RUN_OR_MARK: &[&str] = &["README.md"];

/// The marker that exempts a shell block from being run, on the nearest non-blank line before
/// its opening fence: `<!-- not run by the tests: <reason> -->`.
const NOT_RUN: &str = "<!-- not run by the tests:";

/// The marker on the nearest non-blank line before a ```` ```text ```` block that shows the
/// output of the shell block just before it.
const OUTPUT_OF: &str = "<!-- output of the command above -->";

/// README commands this test runs itself, with a deadline in seconds. A command matches a
/// README line without its trailing `# comment`, spaces collapsed ([`command_key`]); the
/// README's line is what runs, verbatim (`sh -c` in the repository root; see [`run_here`]). A
/// `cargo` command builds, so its deadline covers a first build of the package from scratch.
const RUN_HERE: &[(&str, u64)] = &[
    ("cargo run -p placement-scheduler -- simulate", 1800),
    (
        "cargo run -q -p placement-scheduler -- simulate --placement dr/dr-workload",
        1800,
    ),
    (
        "cargo run -q -p placement-scheduler -- simulate examples/fleet examples/fleet-failover --placement dr/dr-workload",
        1800,
    ),
    (
        "cargo run -q -p placement-scheduler -- simulate examples/scoring --placement ml/gpu-training",
        1800,
    ),
];

/// README commands another test (or CI) runs, with the file that runs them (matched as in
/// [`RUN_HERE`]). Weaker than [`RUN_HERE`]: this test only checks that the file exists and
/// contains the command, not that it runs it as shown.
const RUN_BY_TESTS: &[(&str, &str)] = &[("tests/run.sh", ".ci/run")];

/// Programs that are not ours: a command (a code span, or a logical line of a code block) that
/// starts with one of them has its flags attributed to it, unchecked.
const OTHER_TOOLS: &[&str] = &[
    "addon",
    "apt",
    "apt-get",
    "awk",
    "bash",
    "buildah",
    "cat",
    "curl",
    "docker",
    "etcd",
    "git",
    "go",
    "grep",
    "heaptrack",
    "helm",
    "install",
    "jq",
    "kill",
    "kube-apiserver",
    "kube-controller-manager",
    "kubectl",
    "ls",
    "make",
    "openssl",
    "podman",
    "prlimit",
    "prometheus",
    "promtool",
    "registration",
    "registration-operator",
    "rustc",
    "rustup",
    "sed",
    "setpriv",
    "sh",
    "tar",
    "thanos",
    "wget",
    "xargs",
];

/// Flags of other programs that the docs name outside a command of that program (a code span
/// that is only the flag, say): the flag, the repository file that takes it (checked to
/// mention it) or `None` for a program outside the repository, and whose it is.
const OTHER_FLAGS: &[(&str, Option<&str>, &str)] = &[
    // The hub scorer's flags that ScoreDefinitions replaced, named where the changelog says so.
    ("window", Some("CHANGELOG.md"), "removed scorer flag"),
    (
        "freshness-step",
        Some("CHANGELOG.md"),
        "removed scorer flag",
    ),
    ("max-data-age", Some("CHANGELOG.md"), "removed scorer flag"),
    ("normalise", Some("CHANGELOG.md"), "removed scorer flag"),
    (
        "active-pods-only",
        Some("CHANGELOG.md"),
        "removed scorer flag",
    ),
    ("query-*", Some("CHANGELOG.md"), "removed scorer flags"),
    ("list", Some("images/build.sh"), "images/build.sh"),
    (
        "definitions",
        Some("resource-usage-hub/examples/scorer_scale.rs"),
        "the scorer scale harness",
    ),
    (
        "period",
        Some("resource-usage-hub/examples/scorer_scale.rs"),
        "the scorer scale harness",
    ),
    (
        "valid-for",
        Some("resource-usage-hub/examples/scorer_scale.rs"),
        "the scorer scale harness",
    ),
    ("set", None, "helm install/upgrade"),
    (
        "reuse-values",
        None,
        "helm upgrade (the command the changelog warns about)",
    ),
    ("endpoint", None, "thanos query (a store it queries)"),
    (
        "endpoint-strict",
        None,
        "thanos query (a store it always queries)",
    ),
    (
        "query.replica-label",
        None,
        "thanos query (the label deduplication drops)",
    ),
    (
        "receive.tenant-label-name",
        None,
        "thanos receive (the tenant label it sets)",
    ),
    (
        "receive.tenant-certificate-field",
        None,
        "thanos receive (the tenant from the client certificate)",
    ),
    (
        "auto-approved-csr-users",
        Some("tests/testenv/src/ocm_agents.rs"),
        "OCM's registration controller",
    ),
];

/// Upper-case names in code that are not environment variables of our binaries: the name,
/// the file that reads or defines it (checked to mention it) or `None` for one outside the
/// repository, and what it is.
const OTHER_NAMES: &[(&str, Option<&str>, &str)] = &[
    (
        "OCM_TEST_JOBS",
        Some("tests/run-binaries.sh"),
        "test binaries at once",
    ),
    (
        "CARGO_INCREMENTAL",
        Some(".ci/run"),
        "cargo's incremental compilation, off in CI",
    ),
    (
        "POD_NAME",
        Some("ocm-runtime/src/events.rs"),
        "the Events' reportingInstance",
    ),
    (
        "OCM_MIN_FREE_GB",
        Some("tests/run.sh"),
        "the free disk the test command asks for",
    ),
    (
        "OCM_PLACEMENT_CACHE",
        Some("tests/control-plane/build.sh"),
        "the test tools' cache",
    ),
    (
        "XDG_CACHE_HOME",
        Some("tests/control-plane/build.sh"),
        "the cache's default parent",
    ),
    (
        "OCM_API_VERSION",
        Some("tests/control-plane/versions.env"),
        "the pinned OCM API",
    ),
    (
        "OCM_VERSION",
        Some("tests/control-plane/versions.env"),
        "the pinned OCM module",
    ),
    (
        "OCM_PLACEMENT_SCHEDULER",
        Some("tests/ocm/testdata/placement-suite/manager.go"),
        "the binary upstream's suite runs",
    ),
    (
        "KUBEBUILDER_ASSETS",
        Some("tests/ocm/placement-suite.sh"),
        "envtest's binaries",
    ),
    ("MALLOC_ARENA_MAX", None, "glibc's malloc tunable"),
    (
        "PR_SET_PDEATHSIG",
        Some("tests/testenv/src/process.rs"),
        "a prctl option, not a variable",
    ),
    (
        "SYS_ADMIN",
        Some("resource-usage-hub/tests/manager/admission.rs"),
        "a Linux capability",
    ),
    (
        "DB_PASSWORD",
        Some("resource-usage-hub/tests/manager/config_refs.rs"),
        "the secret variable of an attack test",
    ),
    (
        "INSTALL_NAMESPACE",
        Some("addon-manifests/agent/deployment.yaml"),
        "a placeholder of the agent's manifests",
    ),
];

/// The metric name prefixes of our binaries: a name in the docs with one of them must be
/// served by a binary.
const METRIC_PREFIXES: &[&str] = &[
    "placement_",
    "addon_manager_",
    "score_provider_",
    "scorer_",
    "agent_definition",
    "kube_client_rate_limiter_",
    "leader_election_",
];

/// Names with a metric prefix that are not metrics: the name, the file that defines it
/// (checked to mention it), and what it is.
const NOT_METRICS: &[(&str, &str, &str)] = &[(
    "scorer_conflict",
    "score-provider/src/definition/evaluate.rs",
    "the label of a ScoreDefinition expression's conflict series",
)];

// ---------------------------------------------------------------------------------------------
// The repository and its Markdown.

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("the repository root")
}

/// Tracked files plus untracked ones that are not ignored (a page being written counts).
fn repo_files() -> &'static BTreeSet<String> {
    static FILES: OnceLock<BTreeSet<String>> = OnceLock::new();
    FILES.get_or_init(|| {
        let out = Command::new("git")
            .args([
                "ls-files",
                "--cached",
                "--others",
                "--exclude-standard",
                "-z",
            ])
            .current_dir(repo())
            .output()
            .expect("git ls-files (the docs tests need git)");
        assert!(out.status.success(), "git ls-files: {out:?}");
        String::from_utf8_lossy(&out.stdout)
            .split('\0')
            .filter(|p| !p.is_empty() && repo().join(p).exists())
            .map(str::to_owned)
            .collect()
    })
}

fn repo_dirs() -> &'static BTreeSet<String> {
    static DIRS: OnceLock<BTreeSet<String>> = OnceLock::new();
    DIRS.get_or_init(|| {
        let mut dirs = BTreeSet::from([String::new()]);
        for f in repo_files() {
            let mut p = f.as_str();
            while let Some((parent, _)) = p.rsplit_once('/') {
                dirs.insert(parent.to_owned());
                p = parent;
            }
        }
        dirs
    })
}

fn docs() -> &'static Vec<Markdown> {
    static DOCS: OnceLock<Vec<Markdown>> = OnceLock::new();
    DOCS.get_or_init(|| {
        repo_files()
            .iter()
            .filter(|p| p.ends_with(".md") && !SKIPPED.iter().any(|s| p.starts_with(s)))
            .map(|p| {
                let text = std::fs::read_to_string(repo().join(p)).expect("read a Markdown file");
                Markdown::parse(p, &text)
            })
            .collect()
    })
}

/// README.md and docs/: where a flag, variable or metric must be documented.
fn is_user_doc(path: &str) -> bool {
    path == "README.md" || path.starts_with("docs/")
}

fn read(path: &str) -> Option<String> {
    std::fs::read_to_string(repo().join(path)).ok()
}

// ---------------------------------------------------------------------------------------------
// Reporting.

#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Problem {
    file: String,
    line: usize,
    what: String,
}

fn problem(file: &str, line: usize, what: impl Into<String>) -> Problem {
    Problem {
        file: file.to_owned(),
        line,
        what: what.into(),
    }
}

/// Panics with every problem, sorted by file and line, under the title and the rule.
fn fail_if_any(title: &str, rule: &str, mut problems: Vec<Problem>) {
    problems.sort();
    problems.dedup();
    if problems.is_empty() {
        return;
    }
    let list: Vec<String> = problems
        .iter()
        .map(|p| match p.line {
            0 => format!("  {}: {}", p.file, p.what),
            n => format!("  {}:{}: {}", p.file, n, p.what),
        })
        .collect();
    panic!(
        "{title}: {} problem(s)\n{rule}\n\n{}\n",
        problems.len(),
        list.join("\n")
    );
}

// ---------------------------------------------------------------------------------------------
// 1. Links and anchors.

#[test]
fn links_and_anchors_resolve() {
    let mut problems = Vec::new();
    let mut parsed: BTreeMap<String, Option<Markdown>> = BTreeMap::new();
    for md in docs() {
        for link in &md.links {
            let target = link.target.trim();
            if target.is_empty() {
                problems.push(problem(&md.path, link.line, "a link without a target"));
                continue;
            }
            if has_scheme(target) {
                continue; // external: not fetched
            }
            let (path_part, anchor) = match target.split_once('#') {
                Some((p, a)) => (p, Some(percent_decode(a))),
                None => (target, None),
            };
            let path_part = path_part.split('?').next().unwrap_or_default();
            let resolved = if path_part.is_empty() {
                Some(md.path.clone())
            } else {
                resolve(&md.path, &percent_decode(path_part))
            };
            let Some(resolved) = resolved else {
                problems.push(problem(
                    &md.path,
                    link.line,
                    format!("`{target}` points outside the repository"),
                ));
                continue;
            };
            let is_file = repo_files().contains(&resolved);
            if !is_file && !repo_dirs().contains(&resolved) {
                problems.push(problem(
                    &md.path,
                    link.line,
                    format!("`{target}`: no file or folder `{resolved}` in the repository"),
                ));
                continue;
            }
            let Some(anchor) = anchor else { continue };
            if !is_file {
                problems.push(problem(
                    &md.path,
                    link.line,
                    format!("`{target}`: a folder has no anchors"),
                ));
                continue;
            }
            if resolved.ends_with(".md") {
                let target_md = parsed.entry(resolved.clone()).or_insert_with(|| {
                    docs()
                        .iter()
                        .find(|d| d.path == resolved)
                        .map(|d| Markdown::parse(&d.path, &d.lines.join("\n")))
                        .or_else(|| read(&resolved).map(|t| Markdown::parse(&resolved, &t)))
                });
                let Some(target_md) = target_md else { continue };
                if !target_md.anchors.contains(&anchor) {
                    let near = nearest(&anchor, target_md.anchors.iter());
                    problems.push(problem(
                        &md.path,
                        link.line,
                        format!(
                            "`{target}`: `{resolved}` has no anchor `{anchor}`{}",
                            near.map(|n| format!(" (nearest: `#{n}`)"))
                                .unwrap_or_default()
                        ),
                    ));
                }
            } else if let Some(lines) = anchor.strip_prefix('L') {
                // GitHub's line anchors: #L10, #L10-L20.
                let last: Option<usize> = lines
                    .split("-L")
                    .map(|n| n.parse::<usize>().ok())
                    .collect::<Option<Vec<_>>>()
                    .and_then(|v| v.into_iter().max());
                let count = read(&resolved).map_or(0, |t| t.lines().count());
                if last.is_none_or(|l| l == 0 || l > count) {
                    problems.push(problem(
                        &md.path,
                        link.line,
                        format!("`{target}`: `{resolved}` has {count} lines"),
                    ));
                }
            }
        }
    }
    fail_if_any(
        "broken links",
        "Every relative link must name a file or folder of the repository, and every #anchor a \
         heading of the target as GitHub makes its anchor (lowercase; punctuation but `-` and `_` \
         dropped; spaces to `-`; repeats get -1, -2, ...) or an explicit <a id=\"...\">.",
        problems,
    );
}

fn has_scheme(target: &str) -> bool {
    match target.split_once(':') {
        Some((scheme, _)) => {
            !scheme.is_empty()
                && scheme.starts_with(|c: char| c.is_ascii_alphabetic())
                && scheme
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '.' | '-'))
        }
        None => false,
    }
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && i + 2 < b.len()
            && let Ok(v) = u8::from_str_radix(&s[i + 1..i + 3], 16)
        {
            out.push(v);
            i += 3;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `target` relative to the file `from` (or to the root when it starts with `/`), normalised;
/// `None` when it leaves the repository.
fn resolve(from: &str, target: &str) -> Option<String> {
    let mut parts: Vec<&str> = if target.starts_with('/') {
        Vec::new()
    } else {
        from.split('/').collect::<Vec<_>>()
    };
    if !target.starts_with('/') {
        parts.pop(); // the file's name
    }
    for p in target.split('/') {
        match p {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            p => parts.push(p),
        }
    }
    Some(parts.join("/"))
}

/// The candidate sharing the longest prefix with `want`, for a hint.
fn nearest<'a>(want: &str, candidates: impl Iterator<Item = &'a String>) -> Option<&'a String> {
    candidates
        .map(|c| {
            let common = c
                .chars()
                .zip(want.chars())
                .take_while(|(a, b)| a == b)
                .count();
            (common, c)
        })
        .filter(|(n, _)| *n >= 4)
        .max_by_key(|(n, _)| *n)
        .map(|(_, c)| c)
}

// ---------------------------------------------------------------------------------------------
// 1b. Citations.

#[test]
fn no_citations_outside_the_repository() {
    let mut problems = Vec::new();
    let md_names: BTreeSet<&str> = repo_files()
        .iter()
        .filter(|p| p.ends_with(".md"))
        .map(|p| p.rsplit('/').next().unwrap_or(p))
        .collect();
    for md in docs() {
        // A `.md` name in a code block is a file name (`--out scale.md`), not a citation.
        let in_block: BTreeSet<usize> = md.blocks.iter().flat_map(|b| b.line..=b.end).collect();
        for (i, line) in md.lines.iter().enumerate() {
            let n = i + 1;
            let lower = line.to_lowercase();
            for outside in ["../shared", "shared/reference", "shared/seeds"] {
                if lower.contains(outside) {
                    problems.push(problem(
                        &md.path,
                        n,
                        format!("cites `{outside}`, outside the repository"),
                    ));
                }
            }
            for (word, digits) in [("issue", 1), ("issues", 1), ("seed", 3), ("seeds", 3)] {
                for number in numbered(&lower, word, digits) {
                    problems.push(problem(
                        &md.path,
                        n,
                        format!("cites an internal tracker number: `{word} {number}`"),
                    ));
                }
            }
            let cited = if in_block.contains(&n) {
                Vec::new()
            } else {
                md_citations(line)
            };
            for cited in cited {
                let found = resolve(&md.path, &cited).is_some_and(|p| repo_files().contains(&p))
                    || repo_files().contains(cited.trim_start_matches("./"))
                    || (!cited.contains('/') && md_names.contains(cited.as_str()));
                if !found {
                    problems.push(problem(
                        &md.path,
                        n,
                        format!("cites `{cited}`, which is not in the repository"),
                    ));
                }
            }
        }
        for (n, prose) in &md.prose {
            for r in tracker_refs(prose) {
                problems.push(problem(
                    &md.path,
                    *n,
                    format!("cites an internal tracker number: `{r}`"),
                ));
            }
            let lower = prose.to_lowercase();
            if lower.contains("reference §") || lower.contains("reference's §") {
                problems.push(problem(
                    &md.path,
                    *n,
                    "cites a section of a reference document outside the repository (`reference §…`)",
                ));
            }
        }
    }
    fail_if_any(
        "citations outside the repository",
        "The docs must stand on their own: cite upstream by its repository path (e.g. \
         `open-cluster-management-io/ocm` `pkg/placement/...`, or `ocm#1346`), never a path \
         outside this repository (`../shared`, `shared/reference`, `shared/seeds`), a `.md` \
         document it does not hold, an internal tracker number (`issue 37`, `#37`) or a seed \
         (`seed 000`).",
        problems,
    );
}

/// `<word> <number>` (also `<word> #<number>`) with at least `digits` digits.
fn numbered(lower: &str, word: &str, digits: usize) -> Vec<String> {
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(k) = lower[from..].find(word) {
        let at = from + k;
        from = at + word.len();
        let before_ok = lower[..at]
            .chars()
            .next_back()
            .is_none_or(|c| !c.is_alphanumeric());
        let rest = &lower[at + word.len()..];
        let trimmed = rest.trim_start_matches(' ');
        if !before_ok || trimmed.len() == rest.len() {
            continue;
        }
        let trimmed = trimmed.strip_prefix('#').unwrap_or(trimmed);
        let number: String = trimmed.chars().take_while(char::is_ascii_digit).collect();
        let after = trimmed[number.len()..].chars().next();
        if number.len() >= digits && after.is_none_or(|c| !c.is_alphanumeric()) {
            out.push(number);
        }
    }
    out
}

/// `#37`-style references: `#` and digits, after a space or an opening bracket.
fn tracker_refs(prose: &str) -> Vec<String> {
    let mut out = Vec::new();
    let chars: Vec<char> = prose.chars().collect();
    for (i, c) in chars.iter().enumerate() {
        if *c != '#' {
            continue;
        }
        let before = if i == 0 { ' ' } else { chars[i - 1] };
        if !(before.is_whitespace() || matches!(before, '(' | '[' | ',')) {
            continue;
        }
        let digits: String = chars[i + 1..]
            .iter()
            .take_while(|c| c.is_ascii_digit())
            .collect();
        let after = chars.get(i + 1 + digits.len());
        if !digits.is_empty() && after.is_none_or(|c| !c.is_alphanumeric()) {
            out.push(format!("#{digits}"));
        }
    }
    out
}

/// The `.md` documents a line names (URLs aside).
fn md_citations(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    for word in
        line.split(|c: char| !(c.is_alphanumeric() || matches!(c, '.' | '/' | '_' | '-' | ':')))
    {
        if word.contains("://") {
            continue;
        }
        let word = word.trim_end_matches(['.', ':']).trim_start_matches(':');
        if word.ends_with(".md") && word.len() > 3 && !word.starts_with('/') {
            out.push(word.to_owned());
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// 2. Flags and environment variables.

/// One of our executables: how the docs name it, its `--help` and its subcommands'.
struct Program {
    /// What the messages call it.
    name: &'static str,
    /// Its names on a command line (the basename of the first word).
    names: &'static [&'static str],
    /// Must each flag and variable be documented in README.md or docs/?
    documented: bool,
    help: Help,
    subcommands: BTreeMap<String, Help>,
}

impl Program {
    fn all_flags(&self) -> BTreeSet<&str> {
        std::iter::once(&self.help)
            .chain(self.subcommands.values())
            .flat_map(|h| h.flags.iter().map(String::as_str))
            .collect()
    }

    fn all_envs(&self) -> BTreeSet<&str> {
        std::iter::once(&self.help)
            .chain(self.subcommands.values())
            .flat_map(|h| h.envs.iter().map(String::as_str))
            .collect()
    }
}

/// The executables of the workspace and their `--help`. `chart-readme` is left out: it takes
/// no flags and rewrites the chart's README when run (even with `--help`); so are the examples
/// without a command line (`placement-core`'s `cel_budget`, `cel_memory`).
fn programs() -> &'static Vec<Program> {
    static PROGRAMS: OnceLock<Vec<Program>> = OnceLock::new();
    PROGRAMS.get_or_init(|| {
        let bins = bin_dir();
        build_examples(&bins);
        let examples = bins.join("examples");
        let fleet = PathBuf::from(env!("CARGO_BIN_EXE_fleet"));
        let list: [(&'static str, &'static [&'static str], bool, PathBuf); 9] = [
            (
                "placement-scheduler",
                &["placement-scheduler", "placement", "kubectl-placement"],
                true,
                bins.join("placement-scheduler"),
            ),
            (
                "resource-usage-hub",
                &["resource-usage-hub"],
                true,
                bins.join("resource-usage-hub"),
            ),
            (
                "resource-usage-agent",
                &["resource-usage-agent"],
                true,
                bins.join("resource-usage-agent"),
            ),
            ("crdgen", &["crdgen"], true, bins.join("crdgen")),
            ("fleet", &["fleet"], true, fleet),
            // The harnesses: their flags are checked, not required in the docs.
            ("scale", &["scale"], false, examples.join("scale")),
            (
                "agent_scale",
                &["agent_scale"],
                false,
                examples.join("agent_scale"),
            ),
            (
                "manager_scale",
                &["manager_scale"],
                false,
                examples.join("manager_scale"),
            ),
            (
                "latency_provider",
                &["latency_provider"],
                false,
                examples.join("latency_provider"),
            ),
        ];
        list.into_iter()
            .map(|(name, names, documented, exe)| {
                let help = Help::parse(&help_text(&exe, &[]));
                let subcommands = help
                    .subcommands
                    .iter()
                    .map(|s| (s.clone(), Help::parse(&help_text(&exe, &[s.as_str()]))))
                    .collect();
                Program {
                    name,
                    names,
                    documented,
                    help,
                    subcommands,
                }
            })
            .collect()
    })
}

/// `target/<profile>` with the three shipped binaries built, as the other end-to-end tests
/// build them.
fn bin_dir() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| e2e::fleet::binaries(true).expect("build the binaries"))
        .clone()
}

/// A `cargo` command without what `cargo test` sets for this test's package (passed on, it
/// changes build-script inputs and every run would rebuild them).
fn cargo() -> Command {
    let mut cmd = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    e2e::fleet::clean_cargo_env(&mut cmd);
    cmd.current_dir(repo());
    cmd
}

/// The harness examples and `crdgen`, in one build of every example of the workspace: the
/// feature set `cargo test --workspace` resolves too, so that after it only the examples it
/// builds as tests (`latency_provider`) are linked once more. The shipped binaries, which other
/// tests run meanwhile, are not touched.
fn build_examples(bins: &Path) {
    let mut cmd = cargo();
    cmd.args(["build", "--workspace", "--examples", "--bin", "crdgen"]);
    if bins.ends_with("release") {
        cmd.arg("--release");
    }
    let status = cmd.status().expect("run cargo");
    assert!(status.success(), "{cmd:?}: {status}");
}

fn help_text(exe: &Path, subcommand: &[&str]) -> String {
    let out = Command::new(exe)
        .args(subcommand)
        .arg("--help")
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{} {subcommand:?} --help: {e}", exe.display()));
    assert!(
        out.status.success(),
        "{} {subcommand:?} --help: {out:?}",
        exe.display()
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Who a flag in the docs belongs to.
enum Owner<'a> {
    /// One of our programs, run with this subcommand (or none).
    Ours(&'a Program, Option<String>),
    /// A script of the repository (the path).
    Script(String),
    /// Another program.
    Tool,
    /// No command around it: it must be ours or in [`OTHER_FLAGS`].
    Unattributed,
}

/// The default binary of the packages `cargo run -p` runs here.
const PACKAGE_BINARIES: &[(&str, &str)] = &[
    ("placement-scheduler", "placement-scheduler"),
    ("resource-usage-hub", "resource-usage-hub"),
    ("resource-usage-agent", "resource-usage-agent"),
];

fn program_named(name: &str) -> Option<&'static Program> {
    programs().iter().find(|p| p.names.contains(&name))
}

/// The flags of one simple command, each with its owner.
fn attribute(words: &[String]) -> Vec<(String, Owner<'static>)> {
    let mut i = 0;
    while i < words.len() {
        let w = words[i].as_str();
        if is_assignment(w) || ["sudo", "env", "time", "exec", "nohup", "$"].contains(&w) {
            i += 1;
        } else if w == "nice" {
            i += 1;
            if words.get(i).map(String::as_str) == Some("-n") {
                i += 2;
            }
        } else {
            break;
        }
    }
    let unattributed = |ws: &[String]| {
        ws.iter()
            .filter_map(|w| flag_of(w))
            .map(|f| (f, Owner::Unattributed))
            .collect::<Vec<_>>()
    };
    let Some(first) = words.get(i) else {
        return unattributed(words);
    };
    let first = first.trim_matches(['"', '\'', '(', '[']);
    let base = first.rsplit('/').next().unwrap_or(first);
    let rest = &words[i + 1..];
    if base == "cargo" {
        let sep = rest.iter().position(|w| w == "--");
        let (own, after) = match sep {
            Some(s) => (&rest[..s], &rest[s + 1..]),
            None => (rest, &rest[rest.len()..]),
        };
        let mut out: Vec<(String, Owner<'static>)> = own
            .iter()
            .filter_map(|w| flag_of(w))
            .map(|f| (f, Owner::Tool))
            .collect();
        let value_of = |flag: &str| {
            own.iter()
                .position(|w| w == flag)
                .and_then(|k| own.get(k + 1))
                .map(String::as_str)
        };
        let subcommand = own.iter().find(|w| !w.starts_with('-')).map(String::as_str);
        let binary = value_of("--bin").or(value_of("--example")).or_else(|| {
            value_of("-p").and_then(|p| {
                PACKAGE_BINARIES
                    .iter()
                    .find(|(pkg, _)| *pkg == p)
                    .map(|(_, b)| *b)
            })
        });
        match (subcommand, binary.and_then(program_named)) {
            (Some("run"), Some(program)) => out.extend(ours(program, after)),
            _ => out.extend(
                after
                    .iter()
                    .filter_map(|w| flag_of(w))
                    .map(|f| (f, Owner::Tool)),
            ),
        }
        return out;
    }
    if base == "kubectl"
        && rest.first().map(String::as_str) == Some("placement")
        && let Some(program) = program_named("kubectl-placement")
    {
        return ours(program, &rest[1..]);
    }
    if let Some(program) = program_named(base) {
        return ours(program, rest);
    }
    let script = first.trim_start_matches("./");
    if repo_files().contains(script) {
        return rest
            .iter()
            .filter_map(|w| flag_of(w))
            .map(|f| (f, Owner::Script(script.to_owned())))
            .collect();
    }
    if OTHER_TOOLS.contains(&base) {
        return rest
            .iter()
            .filter_map(|w| flag_of(w))
            .map(|f| (f, Owner::Tool))
            .collect();
    }
    unattributed(&words[i..])
}

fn ours(program: &'static Program, args: &[String]) -> Vec<(String, Owner<'static>)> {
    let subcommand = args
        .first()
        .filter(|a| program.subcommands.contains_key(a.as_str()))
        .cloned();
    args.iter()
        .filter_map(|w| flag_of(w))
        .map(|f| (f, Owner::Ours(program, subcommand.clone())))
        .collect()
}

fn is_assignment(word: &str) -> bool {
    word.split_once('=')
        .is_some_and(|(name, _)| is_env_name(name))
}

/// A flag or variable the docs name, where.
struct Named {
    file: String,
    line: usize,
    owner: Owner<'static>,
    flag: String,
}

/// Every flag the docs name, and every environment variable (name, file, line).
fn named_in_docs() -> (Vec<Named>, Vec<(String, String, usize)>) {
    let mut flags = Vec::new();
    let mut envs = Vec::new();
    for md in docs() {
        for span in &md.spans {
            let cmds = commands(&span.text);
            for words in &cmds {
                for (flag, owner) in attribute(words) {
                    flags.push(Named {
                        file: md.path.clone(),
                        line: span.line,
                        owner,
                        flag,
                    });
                }
            }
            // Outside an environment column only names with a `_` count: `CN=…`, `TTL` and
            // `$TOKEN` are not claims about our variables.
            let mut names: Vec<String> = env_references(&span.text);
            let text = span.text.trim();
            if is_env_name(text) {
                names.push(text.to_owned());
            }
            // `NAME=value` alone, or before a command.
            if let Some(words) = cmds.first() {
                names.extend(
                    words
                        .iter()
                        .take_while(|w| is_assignment(w))
                        .filter_map(|w| w.split_once('=').map(|(n, _)| n.to_owned())),
                );
            }
            names.retain(|n| n.contains('_'));
            let env_column = span.column.as_deref().is_some_and(|c| {
                let c = c.to_lowercase();
                c.contains("environment") || c.split_whitespace().any(|w| w == "env")
            });
            if env_column {
                names.extend(
                    text.split(|c: char| c == ',' || c == '/' || c.is_whitespace())
                        .filter(|w| is_env_name(w))
                        .map(str::to_owned),
                );
            }
            for name in names {
                envs.push((name, md.path.clone(), span.line));
            }
        }
        // Flags in plain text (a table cell, a sentence) have no command around them.
        for (n, prose) in md
            .prose
            .iter()
            .filter(|(n, _)| !md.comment_lines.contains(n))
        {
            for flag in prose.split_whitespace().filter_map(flag_of) {
                flags.push(Named {
                    file: md.path.clone(),
                    line: *n,
                    owner: Owner::Unattributed,
                    flag,
                });
            }
        }
        for block in &md.blocks {
            if [
                "rust",
                "rs",
                "go",
                "promql",
                "python",
                "py",
                "js",
                "javascript",
                "toml",
            ]
            .contains(&block.lang.as_str())
            {
                continue;
            }
            let lines = shell_lines(&block.lines);
            // Shell variables the block sets itself (`TOKEN=$(…)`) are not environment.
            let mut local: BTreeSet<String> = BTreeSet::new();
            for (_, line) in &lines {
                for words in commands(line) {
                    if words.iter().all(|w| is_assignment(w)) {
                        local.extend(
                            words
                                .iter()
                                .filter_map(|w| w.split_once('=').map(|(n, _)| n.to_owned())),
                        );
                    }
                }
            }
            for (n, line) in &lines {
                for words in commands(line) {
                    for (flag, owner) in attribute(&words) {
                        flags.push(Named {
                            file: md.path.clone(),
                            line: *n,
                            owner,
                            flag,
                        });
                    }
                    // `NAME=value command` and `export NAME=value` set the environment; a
                    // bare `NAME=value` sets a shell variable.
                    let (skip, exported) = match words.first().map(String::as_str) {
                        Some("export") => (1, true),
                        _ => (0, false),
                    };
                    let assigned: Vec<&String> = words[skip..]
                        .iter()
                        .take_while(|w| is_assignment(w))
                        .collect();
                    if exported || assigned.len() + skip < words.len() {
                        for w in assigned {
                            if let Some((name, _)) = w.split_once('=')
                                && name.contains('_')
                            {
                                envs.push((name.to_owned(), md.path.clone(), *n));
                            }
                        }
                    }
                }
                for name in env_references(line) {
                    if !local.contains(&name) && name.contains('_') {
                        envs.push((name, md.path.clone(), *n));
                    }
                }
            }
        }
    }
    (flags, envs)
}

#[test]
fn flags_and_environment_variables_the_docs_name_exist() {
    let programs = programs();
    let all_flags: BTreeSet<&str> = programs.iter().flat_map(|p| p.all_flags()).collect();
    let all_envs: BTreeSet<&str> = programs.iter().flat_map(|p| p.all_envs()).collect();
    let (flags, envs) = named_in_docs();
    let mut problems = Vec::new();
    let mut used_other_flags = BTreeSet::new();
    let mut used_other_names = BTreeSet::new();
    for named in &flags {
        let f = named.flag.as_str();
        let what = match &named.owner {
            Owner::Tool => None,
            Owner::Ours(program, sub) => {
                let help = sub
                    .as_ref()
                    .and_then(|s| program.subcommands.get(s))
                    .unwrap_or(&program.help);
                let known = help
                    .flags
                    .iter()
                    .chain(&program.help.flags)
                    .map(String::as_str);
                let command = match sub {
                    Some(s) => format!("{} {s}", program.name),
                    None => program.name.to_owned(),
                };
                (!flag_matches(f, known)).then(|| {
                    format!("`--{f}` is not a flag of `{command}` (see `{command} --help`)")
                })
            }
            Owner::Script(path) => {
                let text = read(path).unwrap_or_default();
                let bare = f.trim_end_matches('*');
                let takes = contains_word(&text, &format!("--{bare}"))
                    || (f.ends_with('*') && text.contains(&format!("--{bare}")));
                (!takes).then(|| format!("`--{f}`: `{path}` does not take it (not in its text)"))
            }
            Owner::Unattributed => {
                if flag_matches(f, all_flags.iter().copied()) {
                    None
                } else if OTHER_FLAGS.iter().any(|(o, _, _)| *o == f) {
                    used_other_flags.insert(f.to_owned());
                    None
                } else {
                    Some(format!(
                        "`--{f}` is no flag of any of our binaries (no `--help` lists it) nor in OTHER_FLAGS"
                    ))
                }
            }
        };
        if let Some(what) = what {
            problems.push(problem(&named.file, named.line, what));
        }
    }
    for (name, file, line) in &envs {
        if all_envs.contains(name.as_str()) {
            continue;
        }
        if OTHER_NAMES.iter().any(|(o, _, _)| o == name) {
            used_other_names.insert(name.clone());
            continue;
        }
        problems.push(problem(
            file,
            *line,
            format!(
                "`{name}` is no environment variable of any of our binaries (no `--help` lists `[env: {name}=]`) nor in OTHER_NAMES"
            ),
        ));
    }
    // The allowlists stay true and small.
    for (flag, file, whose) in OTHER_FLAGS {
        if all_flags.contains(flag) {
            problems.push(problem(
                "tests/e2e/tests/docs.rs",
                0,
                format!("OTHER_FLAGS: `--{flag}` ({whose}) is a flag of ours now: remove it"),
            ));
        } else if !used_other_flags.contains(*flag) {
            problems.push(problem(
                "tests/e2e/tests/docs.rs",
                0,
                format!("OTHER_FLAGS: no doc names `--{flag}` ({whose}) any more: remove it"),
            ));
        }
        if let Some(file) = file
            && !read(file).is_some_and(|t| contains_word(&t, &format!("--{flag}")))
        {
            problems.push(problem(
                "tests/e2e/tests/docs.rs",
                0,
                format!("OTHER_FLAGS: `--{flag}` ({whose}): `{file}` does not mention it"),
            ));
        }
    }
    for (name, file, what) in OTHER_NAMES {
        if let Some(file) = file
            && !read(file).is_some_and(|t| t.contains(name))
        {
            problems.push(problem(
                "tests/e2e/tests/docs.rs",
                0,
                format!("OTHER_NAMES: `{name}` ({what}): `{file}` does not mention it"),
            ));
        }
        if !used_other_names.contains(*name) {
            problems.push(problem(
                "tests/e2e/tests/docs.rs",
                0,
                format!("OTHER_NAMES: no doc names `{name}` ({what}) any more: remove it"),
            ));
        }
    }
    fail_if_any(
        "flags and environment variables that do not exist",
        "Every `--flag` and environment variable in a code span, code block or table must exist: \
         in a command of one of our binaries (`placement-scheduler simulate …`, \
         `cargo run -p X -- …`, `kubectl placement …`), in that subcommand's `--help`; in a \
         command of a repository script, in the script; alone, in some binary's `--help`. A \
         command that starts with another program (OTHER_TOOLS: cargo, helm, kubectl, …) may \
         use its flags; another program's flag outside such a command goes into OTHER_FLAGS \
         with whose it is, and an upper-case name that is not our variable into OTHER_NAMES \
         with the file that reads it (both in tests/e2e/tests/docs.rs).",
        problems,
    );
}

/// Whether `flag` (or, for `name-*`, some flag starting with `name-`) is one of `known`.
fn flag_matches<'a>(flag: &str, mut known: impl Iterator<Item = &'a str>) -> bool {
    match flag.strip_suffix('*') {
        Some(prefix) => known.any(|k| k.starts_with(prefix)),
        None => known.any(|k| k == flag),
    }
}

/// `needle` in `text`, not followed by another flag character (`--tag` is not in `--tags`).
fn contains_word(text: &str, needle: &str) -> bool {
    let mut from = 0;
    while let Some(k) = text[from..].find(needle) {
        let at = from + k;
        let end = at + needle.len();
        let before = text[..at].chars().next_back();
        let after = text[end..].chars().next();
        let word_char = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
        if before.is_none_or(|c| !word_char(c) || needle.starts_with('-'))
            && after.is_none_or(|c| !word_char(c))
        {
            return true;
        }
        from = end;
    }
    false
}

#[test]
fn every_flag_and_environment_variable_is_documented() {
    let mut text = String::new();
    for md in docs().iter().filter(|d| is_user_doc(&d.path)) {
        text.push_str(&md.lines.join("\n"));
        text.push('\n');
    }
    let mut problems = Vec::new();
    for program in programs().iter().filter(|p| p.documented) {
        let helps = std::iter::once((program.name.to_owned(), &program.help)).chain(
            program
                .subcommands
                .iter()
                .map(|(s, h)| (format!("{} {s}", program.name), h)),
        );
        for (command, help) in helps {
            for flag in &help.flags {
                if ["help", "version"].contains(&flag.as_str()) {
                    continue;
                }
                if !contains_word(&text, &format!("--{flag}")) {
                    problems.push(problem(
                        &command,
                        0,
                        format!("`--{flag}` is in no README.md or docs/*.md"),
                    ));
                }
            }
            for env in &help.envs {
                if !contains_env(&text, env) {
                    problems.push(problem(
                        &command,
                        0,
                        format!("`{env}` (environment) is in no README.md or docs/*.md"),
                    ));
                }
            }
        }
    }
    fail_if_any(
        "undocumented flags and environment variables",
        "Every flag and environment variable a shipped binary's `--help` lists (placement-scheduler, \
         resource-usage-hub, resource-usage-agent, crdgen, fleet; each subcommand) must appear in \
         README.md or a page under docs/.",
        problems,
    );
}

fn contains_env(text: &str, name: &str) -> bool {
    let mut from = 0;
    while let Some(k) = text[from..].find(name) {
        let at = from + k;
        let end = at + name.len();
        let env_char = |c: char| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_';
        if text[..at].chars().next_back().is_none_or(|c| !env_char(c))
            && text[end..].chars().next().is_none_or(|c| !env_char(c))
        {
            return true;
        }
        from = end;
    }
    false
}

// ---------------------------------------------------------------------------------------------
// 3. The README's commands.

#[test]
fn readme_commands_are_run_or_marked() {
    let mut problems = Vec::new();
    let mut seen: BTreeSet<String> = BTreeSet::new();
    for md in docs()
        .iter()
        .filter(|d| RUN_OR_MARK.contains(&d.path.as_str()))
    {
        problems.extend(check_shell_blocks(
            md,
            RUN_HERE,
            RUN_BY_TESTS,
            &mut run_here,
            &mut seen,
        ));
    }
    for (command, _) in RUN_HERE {
        if !seen.contains(*command) {
            problems.push(problem(
                "tests/e2e/tests/docs.rs",
                0,
                format!("RUN_HERE: `{command}` is in no shell block of {RUN_OR_MARK:?}: remove it"),
            ));
        }
    }
    for (command, _) in RUN_BY_TESTS {
        if !seen.contains(*command) {
            problems.push(problem(
                "tests/e2e/tests/docs.rs",
                0,
                format!(
                    "RUN_BY_TESTS: `{command}` is in no shell block of {RUN_OR_MARK:?}: remove it"
                ),
            ));
        }
    }
    fail_if_any(
        "README commands",
        "Every ```sh (bash, shell) block of README.md either has `<!-- not run by the tests: \
         <reason> -->` on the line before its fence (blank lines allowed), or each of its command \
         lines (a line, with `\\` continuations joined) is run by a test: listed in RUN_HERE (this \
         test runs it verbatim, `sh -c` in the repository root) or RUN_BY_TESTS (the named file \
         runs it), both in tests/e2e/tests/docs.rs. A block followed by `<!-- output of the \
         command above -->` and a ```text block shows what its commands print; that is compared \
         with what they print (see `matches_output`).",
        problems,
    );
}

/// The problems of one file's shell blocks (see [`readme_commands_are_run_or_marked`]);
/// `run` runs a [`RUN_HERE`] command, and `seen` collects the table entries met.
fn check_shell_blocks(
    md: &Markdown,
    run_here_table: &[(&str, u64)],
    run_by_tests: &[(&str, &str)],
    run: &mut dyn FnMut(&str, Duration) -> Result<String, String>,
    seen: &mut BTreeSet<String>,
) -> Vec<Problem> {
    let mut problems = Vec::new();
    for (index, block) in md.blocks.iter().enumerate() {
        if !["sh", "bash", "shell", "console", "zsh"].contains(&block.lang.as_str()) {
            continue;
        }
        if let Some((n, before)) = &block.before
            && let Some(rest) = before.strip_prefix(NOT_RUN)
        {
            let reason = rest.trim_end_matches("-->").trim();
            if reason.is_empty() {
                problems.push(problem(&md.path, *n, "the marker gives no reason"));
            }
            continue;
        }
        let mut outputs = String::new();
        let mut all_ran = true;
        for (n, line) in shell_lines(&block.lines) {
            let key = command_key(&line);
            if let Some((command, deadline)) = run_here_table.iter().find(|(c, _)| *c == key) {
                seen.insert(command.to_string());
                match run(&line, Duration::from_secs(*deadline)) {
                    Ok(out) => outputs.push_str(&out),
                    Err(e) => {
                        all_ran = false;
                        problems.push(problem(&md.path, n, format!("`{line}` failed: {e}")));
                    }
                }
            } else if let Some((command, file)) = run_by_tests.iter().find(|(c, _)| *c == key) {
                seen.insert(command.to_string());
                all_ran = false; // no output to compare
                if !read(file).is_some_and(|t| t.contains(command)) {
                    problems.push(problem(
                        &md.path,
                        n,
                        format!(
                            "`{command}`: RUN_BY_TESTS names `{file}`, which does not contain it"
                        ),
                    ));
                }
            } else {
                all_ran = false;
                problems.push(problem(
                    &md.path,
                    n,
                    format!("`{line}` is run by no test and its block is not marked"),
                ));
            }
        }
        // The output the docs show, when they show it.
        if let Some((n, after)) = &block.after
            && after == OUTPUT_OF
        {
            let shown = md
                .blocks
                .get(index + 1)
                .filter(|b| b.before.as_ref().map(|(l, _)| l) == Some(n) && b.lang == "text");
            match shown {
                None => problems.push(problem(
                    &md.path,
                    *n,
                    format!("`{OUTPUT_OF}` must be followed by a ```text block"),
                )),
                Some(shown) if all_ran => {
                    let shown: Vec<&str> = shown.lines.iter().map(|(_, l)| l.as_str()).collect();
                    if let Err(e) = matches_output(&shown, &outputs) {
                        problems.push(problem(&md.path, *n, e));
                    }
                }
                Some(_) => problems.push(problem(
                    &md.path,
                    *n,
                    "the shown output belongs to commands this test does not run (RUN_HERE)",
                )),
            }
        }
    }
    problems
}

/// A command line as the tables name it: without a trailing `# comment` (a `#` after a space,
/// outside quotes), spaces collapsed.
fn command_key(line: &str) -> String {
    let mut quote: Option<char> = None;
    let mut previous = ' ';
    let mut end = line.len();
    for (i, c) in line.char_indices() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '\'' | '"') => quote = Some(c),
            (None, '#') if previous.is_whitespace() => {
                end = i;
                break;
            }
            _ => {}
        }
        previous = c;
    }
    line[..end].split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Runs a README command verbatim: `sh -c` in the repository root, stdin empty, within
/// `deadline`; its standard output when it exits 0. Two things differ from a reader's shell:
/// the shipped binaries' folder (`target/<profile>`) comes first on PATH, as if installed, and
/// cargo builds into `target/docs-commands`: `cargo run -p X` resolves features for X alone,
/// and in the shared target folder it would replace `target/<profile>/X` (built for the whole
/// fleet) while other tests run it. That folder costs one build of X, once.
fn run_here(command: &str, deadline: Duration) -> Result<String, String> {
    let bins = bin_dir();
    let target = bins
        .parent()
        .ok_or("no target folder")?
        .join("docs-commands");
    let mut path =
        std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()).collect::<Vec<_>>();
    path.insert(0, bins.clone());
    if let Some(cargo) = std::env::var_os("CARGO").map(PathBuf::from)
        && let Some(dir) = cargo.parent()
    {
        path.push(dir.to_path_buf());
    }
    let path = std::env::join_paths(path).map_err(|e| e.to_string())?;
    let mut cmd = Command::new("sh");
    cmd.args(["-c", command])
        .current_dir(repo())
        .env("PATH", path)
        .env("CARGO_TARGET_DIR", &target)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    e2e::fleet::clean_cargo_env(&mut cmd);
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    let mut child = cmd.spawn().map_err(|e| format!("sh: {e}"))?;
    let mut stdout = child.stdout.take().ok_or("no stdout")?;
    let mut stderr = child.stderr.take().ok_or("no stderr")?;
    let out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stdout.read_to_string(&mut s);
        s
    });
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
            break Some(status);
        }
        if start.elapsed() > deadline {
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{}", child.id())])
                .status();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let out = out.join().unwrap_or_default();
    let err = err.join().unwrap_or_default();
    let tail: String = err
        .lines()
        .rev()
        .take(15)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect::<Vec<_>>()
        .join("\n");
    match status {
        None => Err(format!(
            "not done within {deadline:?}; its last errors:\n{tail}"
        )),
        Some(s) if !s.success() => Err(format!("{s}; its last errors:\n{tail}")),
        Some(_) if out.trim().is_empty() => Err("it printed nothing".into()),
        Some(_) => Ok(out),
    }
}

/// Whether the output a README block shows matches what its commands printed, after this
/// normalisation: trailing spaces and trailing blank lines are ignored, RFC 3339 timestamps
/// (`2026-11-26T10:00:00Z`) on both sides read as `<time>`, and a shown line that is only `...`
/// (or `…`) stands for any number of lines.
fn matches_output(shown: &[&str], actual: &str) -> Result<(), String> {
    let norm = |l: &str| normalise_times(l.trim_end());
    let mut shown: Vec<String> = shown.iter().map(|l| norm(l)).collect();
    let mut actual: Vec<String> = actual.lines().map(norm).collect();
    while shown.last().is_some_and(String::is_empty) {
        shown.pop();
    }
    while actual.last().is_some_and(String::is_empty) {
        actual.pop();
    }
    if lines_match(&shown, &actual) {
        return Ok(());
    }
    // The first shown line (a literal one) that no longer matches, for the message.
    let first_bad = shown
        .iter()
        .find(|l| !is_ellipsis(l) && !actual.contains(l))
        .cloned()
        .unwrap_or_default();
    Err(format!(
        "the shown output differs from what the command prints (first line not printed: {first_bad:?}); it prints:\n{}",
        actual
            .iter()
            .take(40)
            .map(|l| format!("    {l}"))
            .collect::<Vec<_>>()
            .join("\n")
    ))
}

fn is_ellipsis(l: &str) -> bool {
    matches!(l.trim(), "..." | "…")
}

fn lines_match(shown: &[String], actual: &[String]) -> bool {
    match shown.split_first() {
        None => actual.is_empty(),
        Some((first, rest)) if is_ellipsis(first) => {
            (0..=actual.len()).any(|k| lines_match(rest, &actual[k..]))
        }
        Some((first, rest)) => actual.first() == Some(first) && lines_match(rest, &actual[1..]),
    }
}

/// RFC 3339 timestamps as `<time>`.
fn normalise_times(line: &str) -> String {
    let b = line.as_bytes();
    let mut out = String::new();
    let mut i = 0;
    let digit = |k: usize| b.get(k).is_some_and(u8::is_ascii_digit);
    let at = |k: usize, c: u8| b.get(k) == Some(&c);
    while i < b.len() {
        let stamp = (0..4).all(|k| digit(i + k))
            && at(i + 4, b'-')
            && digit(i + 5)
            && digit(i + 6)
            && at(i + 7, b'-')
            && digit(i + 8)
            && digit(i + 9)
            && (at(i + 10, b'T') || at(i + 10, b' '))
            && digit(i + 11)
            && digit(i + 12)
            && at(i + 13, b':');
        if stamp {
            let mut j = i + 14;
            while j < b.len() && (b[j].is_ascii_digit() || matches!(b[j], b':' | b'.')) {
                j += 1;
            }
            if at(j, b'Z') {
                j += 1;
            } else if (at(j, b'+') || at(j, b'-')) && digit(j + 1) {
                j += 1;
                while j < b.len() && (b[j].is_ascii_digit() || b[j] == b':') {
                    j += 1;
                }
            }
            out.push_str("<time>");
            i = j;
        } else {
            let c = line[i..].chars().next().unwrap_or_default();
            out.push(c);
            i += c.len_utf8().max(1);
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// 4. The chart's alerts.

#[test]
fn every_alert_has_a_troubleshooting_heading() {
    let rules_path = "charts/ocm-placement/files/prometheus-rules.yaml";
    let rules: Value = serde_saphyr::from_str(&read(rules_path).expect("the chart's rules"))
        .expect("the rules are YAML");
    let mut alerts: Vec<String> = Vec::new();
    for group in rules["groups"].as_array().expect("groups") {
        for rule in group["rules"].as_array().expect("rules") {
            if let Some(alert) = rule["alert"].as_str() {
                alerts.push(alert.to_owned());
            }
        }
    }
    assert!(alerts.len() >= 5, "the rules file names {alerts:?}");
    let page = "docs/troubleshooting.md";
    let mut problems = Vec::new();
    match docs().iter().find(|d| d.path == page) {
        None => problems.push(problem(
            page,
            0,
            format!(
                "does not exist; it needs a heading for each alert: {}",
                alerts.join(", ")
            ),
        )),
        Some(md) => {
            let headings: BTreeSet<&str> = md.headings.iter().map(|h| h.text.as_str()).collect();
            for alert in &alerts {
                if !headings.contains(alert.as_str()) {
                    problems.push(problem(
                        page,
                        0,
                        format!("no heading `{alert}` (anchor #{})", alert.to_lowercase()),
                    ));
                }
            }
            for h in &md.headings {
                let name = render_inline(&h.text);
                if name.starts_with("OcmPlacement") && !alerts.contains(&name) {
                    problems.push(problem(
                        page,
                        h.line,
                        format!("`{name}` is no alert of {rules_path} (renamed or removed?)"),
                    ));
                }
            }
        }
    }
    fail_if_any(
        "alerts without a troubleshooting section",
        "Every alert of charts/ocm-placement/files/prometheus-rules.yaml needs a heading in \
         docs/troubleshooting.md whose text is exactly the alert's name (its anchor is the name \
         in lower case): what it means and what to do.",
        problems,
    );
}

// ---------------------------------------------------------------------------------------------
// 5. Metrics.

/// A metric of ours: its type, where it is registered, and which binaries served it at rest.
struct Metric {
    kind: String,
    registered: String,
    served_by: BTreeSet<String>,
}

/// Every metric the binaries register, from their source (`e2e::docs::registrations` over
/// every `src/` file of the workspace crates, tests aside), checked against what the binaries
/// serve. Source, because a labelled family with no series yet is not served at all (its
/// `# TYPE` line included): started at rest, the binaries show about half of their metrics.
/// The scrape keeps the scan honest: every metric served must have been found, with the type
/// it is served as. Also the problems of that cross-check.
fn metrics() -> &'static (BTreeMap<String, Metric>, Vec<Problem>) {
    static METRICS: OnceLock<(BTreeMap<String, Metric>, Vec<Problem>)> = OnceLock::new();
    METRICS.get_or_init(|| {
        let mut metrics: BTreeMap<String, Metric> = BTreeMap::new();
        let mut problems = Vec::new();
        let mut unknown_kind = Vec::new();
        for file in repo_files().iter().filter(|p| {
            p.ends_with(".rs")
                && !p.starts_with("tests/")
                && p.contains("/src/")
                && !p.contains("/tests/")
                && !p.ends_with("/tests.rs")
        }) {
            let Some(source) = read(file) else { continue };
            for r in e2e::docs::registrations(&source) {
                let registered = format!("{file}:{}", r.line);
                match r.kind {
                    Some(kind) => {
                        metrics.insert(
                            r.name,
                            Metric {
                                kind,
                                registered,
                                served_by: BTreeSet::new(),
                            },
                        );
                    }
                    None => unknown_kind.push((r.name, registered)),
                }
            }
        }
        for (name, (kind, by)) in served_metrics() {
            match metrics.get_mut(name) {
                Some(m) if m.kind == *kind => m.served_by.extend(by.iter().cloned()),
                Some(m) => problems.push(problem(
                    &m.registered,
                    0,
                    format!("`{name}` is served as a {kind}, the source scan says {}", m.kind),
                )),
                None => {
                    let registered = unknown_kind
                        .iter()
                        .find(|(n, _)| n == name)
                        .map(|(_, r)| r.clone());
                    match registered {
                        Some(registered) => {
                            metrics.insert(
                                name.clone(),
                                Metric {
                                    kind: kind.clone(),
                                    registered,
                                    served_by: by.clone(),
                                },
                            );
                        }
                        None => problems.push(problem(
                            "tests/e2e/src/docs.rs",
                            0,
                            format!(
                                "`{name}` ({kind}, served by {}) was not found by the source scan (`registrations`): teach it the new registration",
                                by.iter().cloned().collect::<Vec<_>>().join(", ")
                            ),
                        )),
                    }
                }
            }
        }
        for (name, registered) in unknown_kind {
            if !metrics.contains_key(&name) {
                problems.push(problem(
                    &registered,
                    0,
                    format!("cannot tell the type of `{name}` from its source, and no binary served it at rest"),
                ));
            }
        }
        for name in metrics.keys() {
            if !METRIC_PREFIXES.iter().any(|p| name.starts_with(p)) {
                problems.push(problem(
                    "tests/e2e/tests/docs.rs",
                    0,
                    format!("METRIC_PREFIXES: `{name}` has none of them: add its prefix"),
                ));
            }
        }
        assert!(metrics.len() >= 40, "too few metrics found: {:?}", metrics.keys());
        (metrics, problems)
    })
}

/// What the binaries serve on `/metrics` at rest: `(name, type)` and which binaries. Every
/// binary registers its metrics before it serves and before it waits for the hub, so each is
/// started against a hub that is not there and scraped while it waits.
fn served_metrics() -> &'static BTreeMap<String, (String, BTreeSet<String>)> {
    static METRICS: OnceLock<BTreeMap<String, (String, BTreeSet<String>)>> = OnceLock::new();
    METRICS.get_or_init(|| {
        let bins = bin_dir();
        let dir = std::env::temp_dir().join(format!("docs-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a temporary folder");
        let kubeconfig = dir.join("nowhere.kubeconfig");
        let closed = e2e::chart::free_port().expect("a port");
        std::fs::write(
            &kubeconfig,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: nowhere\n  cluster:\n    server: https://127.0.0.1:{closed}\n    insecure-skip-tls-verify: true\nusers:\n- name: docs\n  user:\n    token: docs-test\ncontexts:\n- name: docs\n  context:\n    cluster: nowhere\n    user: docs\ncurrent-context: docs\n"
            ),
        )
        .expect("write the kubeconfig");
        let k = kubeconfig.display().to_string();
        let runs: [(&str, &str, Vec<String>); 4] = [
            (
                "placement-scheduler controller",
                "placement-scheduler",
                vec![
                    "controller".into(),
                    format!("--kubeconfig={k}"),
                    "--debug-bind-address=".into(),
                ],
            ),
            (
                "resource-usage-hub manager",
                "resource-usage-hub",
                vec![
                    "manager".into(),
                    format!("--kubeconfig={k}"),
                    "--agent-image=agent:docs".into(),
                ],
            ),
            (
                "resource-usage-hub scorer",
                "resource-usage-hub",
                vec![
                    "scorer".into(),
                    format!("--kubeconfig={k}"),
                    format!("--prometheus-url=http://127.0.0.1:{closed}"),
                ],
            ),
            (
                "resource-usage-agent run",
                "resource-usage-agent",
                vec![
                    "run".into(),
                    format!("--hub-kubeconfig={k}"),
                    "--cluster-name=docs".into(),
                    "--source=host".into(),
                    "--health-lease=false".into(),
                ],
            ),
        ];
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        let mut metrics: BTreeMap<String, (String, BTreeSet<String>)> = BTreeMap::new();
        for (what, binary, args) in runs {
            let port = e2e::chart::free_port().expect("a port");
            let log = dir.join(format!("{binary}-{port}.log"));
            let mut child = Command::new(bins.join(binary))
                .args(&args)
                .arg(format!("--metrics-bind-address=127.0.0.1:{port}"))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(&log).expect("a log file"))
                .spawn()
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            let deadline = Instant::now() + Duration::from_secs(60);
            let page = loop {
                if let Ok((200, page)) =
                    rt.block_on(testenv::http::get(([127, 0, 0, 1], port).into(), "/metrics"))
                {
                    break Some(page);
                }
                if Instant::now() > deadline || child.try_wait().ok().flatten().is_some() {
                    break None;
                }
                std::thread::sleep(Duration::from_millis(200));
            };
            let _ = child.kill();
            let _ = child.wait();
            let page = page.unwrap_or_else(|| {
                panic!(
                    "{what} served no /metrics: {}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                )
            });
            for line in page.lines() {
                let mut w = line.split_whitespace();
                if w.next() == Some("#")
                    && w.next() == Some("TYPE")
                    && let (Some(name), Some(kind)) = (w.next(), w.next())
                {
                    metrics
                        .entry(name.to_owned())
                        .or_insert_with(|| (kind.to_owned(), BTreeSet::new()))
                        .1
                        .insert(what.to_owned());
                }
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
        assert!(metrics.len() >= 10, "too few metrics served: {metrics:?}");
        metrics
    })
}

#[test]
fn every_metric_is_documented_with_its_type() {
    let (metrics, scan_problems) = metrics();
    let page = "docs/metrics.md";
    let mut problems: Vec<Problem> = scan_problems
        .iter()
        .map(|p| problem(&p.file, p.line, p.what.clone()))
        .collect();
    let describe = |name: &str, m: &Metric| {
        let shown = query_names(name, &m.kind)
            .pop()
            .unwrap_or_else(|| name.to_owned());
        let by = if m.served_by.is_empty() {
            format!("registered at {}", m.registered)
        } else {
            format!(
                "served by {}",
                m.served_by.iter().cloned().collect::<Vec<_>>().join(", ")
            )
        };
        format!("`{shown}` ({}; {by})", m.kind)
    };
    match docs().iter().find(|d| d.path == page) {
        None => {
            let list: Vec<String> = metrics
                .iter()
                .map(|(n, m)| format!("    {}", describe(n, m)))
                .collect();
            problems.push(problem(
                page,
                0,
                format!(
                    "does not exist; it needs each metric with its type:\n{}",
                    list.join("\n")
                ),
            ));
        }
        Some(md) => {
            for (name, m) in metrics {
                let names = query_names(name, &m.kind);
                let documented = md.spans.iter().any(|s| {
                    metric_in_span(&s.text).is_some_and(|n| names.iter().any(|q| q == n))
                        && md.lines.get(s.line - 1).is_some_and(|l| {
                            l.to_lowercase()
                                .split(|c: char| !c.is_ascii_alphanumeric())
                                .any(|w| w == m.kind)
                        })
                });
                if !documented {
                    problems.push(problem(
                        page,
                        0,
                        format!("{} is not on a line with its type", describe(name, m)),
                    ));
                }
            }
        }
    }
    fail_if_any(
        "undocumented metrics",
        "Every metric the binaries register must be in docs/metrics.md: its name in a code span \
         (a counter as `name_total` or `name`, a histogram as `name` or `name_bucket`…; labels \
         may follow: `name{label}`) on a line (a table row) that names its type (counter, gauge, \
         histogram, info). The metrics are found in the source (every `register(\"name\", …)` \
         under its `sub_registry_with_prefix`), checked against what the binaries serve.",
        problems,
    );
}

/// The names a metric of this type is queried by, the one to document last.
fn query_names(name: &str, kind: &str) -> Vec<String> {
    let suffixes: &[&str] = match kind {
        "counter" => &["", "_total"],
        "histogram" | "gaugehistogram" | "summary" => &["_bucket", "_sum", "_count", ""],
        "info" => &["", "_info"],
        _ => &[""],
    };
    suffixes.iter().map(|s| format!("{name}{s}")).collect()
}

/// The metric name a code span starts with (`placement_schedules_total{result="…"}`), unless
/// it is a Rust path, a method or a function call.
fn metric_in_span(text: &str) -> Option<&str> {
    let end = text
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
        .unwrap_or(text.len());
    let name = &text[..end];
    if name.contains("::") || name.ends_with(':') || text[end..].starts_with(['(', '.']) {
        return None;
    }
    METRIC_PREFIXES
        .iter()
        .any(|p| name.starts_with(p) && name.len() > p.len())
        .then_some(name)
}

#[test]
fn metrics_the_docs_name_exist() {
    let (metrics, _) = metrics();
    let known: BTreeSet<String> = metrics
        .iter()
        .flat_map(|(n, m)| query_names(n, &m.kind))
        .collect();
    let crates: BTreeSet<String> = repo_files()
        .iter()
        .filter(|p| p.ends_with("/Cargo.toml"))
        .filter_map(|p| p.trim_end_matches("/Cargo.toml").rsplit('/').next())
        .map(|c| c.replace('-', "_"))
        .collect();
    let mut problems = Vec::new();
    let mut used_not_metrics = BTreeSet::new();
    for md in docs() {
        for span in &md.spans {
            let Some(name) = metric_in_span(&span.text) else {
                continue;
            };
            if NOT_METRICS.iter().any(|(n, _, _)| *n == name) {
                used_not_metrics.insert(name);
                continue;
            }
            if !known.contains(name) && !crates.contains(name) {
                problems.push(problem(
                    &md.path,
                    span.line,
                    format!("`{name}` is no metric of ours"),
                ));
            }
        }
    }
    for (name, file, what) in NOT_METRICS {
        if !read(file).is_some_and(|t| t.contains(name)) {
            problems.push(problem(
                "tests/e2e/tests/docs.rs",
                0,
                format!("NOT_METRICS: `{name}` ({what}): `{file}` does not mention it"),
            ));
        }
        if !used_not_metrics.contains(name) {
            problems.push(problem(
                "tests/e2e/tests/docs.rs",
                0,
                format!("NOT_METRICS: no doc names `{name}` ({what}) any more: remove it"),
            ));
        }
    }
    fail_if_any(
        "metrics that do not exist",
        "A name in a code span with one of our metric prefixes (METRIC_PREFIXES: placement_, \
         addon_manager_, score_provider_, scorer_, kube_client_rate_limiter_, leader_election_) \
         must be a metric the binaries register (a counter as `name` or `name_total`; a \
         histogram as `name`, `name_bucket`, `name_sum`, `name_count`); a name with such a \
         prefix that is not a metric goes into NOT_METRICS with the file that defines it.",
        problems,
    );
}

// ---------------------------------------------------------------------------------------------
// The checks' own pieces, on made-up input.

#[test]
fn shell_blocks_are_run_marked_or_reported() {
    let md = Markdown::parse(
        "README.md",
        "<!-- not run by the tests: needs a hub -->\n```sh\nkubectl get x\n```\n\n\
         ```sh\nrun me\n```\n\n<!-- output of the command above -->\n```text\nhello\n...\nbye\n```\n\n\
         ```bash\nrun me\nunknown \\\n  --flag\n```\n\n<!-- not run by the tests: -->\n```sh\nx\n```\n\n\
         ```sh\nrun me\n```\n<!-- output of the command above -->\n```text\nhello\nworld\n```\n\n\
         ```sh\nci runs me\n```\n",
    );
    let mut ran = Vec::new();
    let mut run = |c: &str, _: Duration| {
        ran.push(c.to_owned());
        Ok("hello\n2026-11-26T10:00:00Z middle\nbye\n".to_owned())
    };
    let mut seen = BTreeSet::new();
    let problems = check_shell_blocks(
        &md,
        &[("run me", 1)],
        &[("ci runs me", "tests/run.sh")],
        &mut run,
        &mut seen,
    );
    let got: Vec<(usize, &str)> = problems
        .iter()
        .map(|p| (p.line, p.what.split(':').next().unwrap_or_default()))
        .collect();
    assert_eq!(
        got,
        [
            (
                19,
                "`unknown --flag` is run by no test and its block is not marked"
            ),
            (23, "the marker gives no reason"),
            (
                31,
                "the shown output differs from what the command prints (first line not printed"
            ),
            (38, "`ci runs me`"),
        ],
        "{problems:?}"
    );
    assert_eq!(ran, ["run me", "run me", "run me"]);
    assert_eq!(
        seen.into_iter().collect::<Vec<_>>(),
        ["ci runs me", "run me"]
    );
}

#[test]
fn command_keys_drop_comments_and_extra_spaces() {
    assert_eq!(
        command_key("a  --x 'b # c'   # the comment"),
        "a --x 'b # c'"
    );
    assert_eq!(command_key("curl x#y"), "curl x#y");
}

#[test]
fn shown_output_matches_with_ellipses_and_times() {
    let actual = "a\nat 2026-11-26T10:00:00.5+01:00 done  \nb\nc\n\n";
    assert!(matches_output(&["a", "at 2027-01-01T00:00:00Z done", "b", "c", ""], actual).is_ok());
    assert!(matches_output(&["a", "...", "c"], actual).is_ok());
    assert!(matches_output(&["…"], actual).is_ok());
    assert!(matches_output(&["a", "c"], actual).is_err());
    assert!(matches_output(&["a", "...", "d"], actual).is_err());
    assert_eq!(normalise_times("x 2026-11-26 10:00:00Z y"), "x <time> y");
}

#[test]
fn citations_and_paths() {
    assert_eq!(numbered("before issues 17 and 22", "issues", 1), ["17"]);
    assert_eq!(numbered("tissue 4, issue #37's", "issue", 1), ["37"]);
    assert_eq!(numbered("(seed 1) seed 002's", "seed", 3), ["002"]);
    assert_eq!(
        tracker_refs("PR #1436, ocm#1346 (#7) #1 a#2 #x"),
        ["#1436", "#7", "#1"]
    );
    assert_eq!(
        md_citations("see `ocm-placement.md` §3, docs/security.md and https://x.io/a/README.md."),
        ["ocm-placement.md", "docs/security.md"]
    );
    assert_eq!(
        resolve("docs/a.md", "../README.md"),
        Some("README.md".into())
    );
    assert_eq!(resolve("docs/a.md", "b.md"), Some("docs/b.md".into()));
    assert_eq!(resolve("docs/a.md", "/charts/x"), Some("charts/x".into()));
    assert_eq!(resolve("docs/a.md", "../../x.md"), None);
    assert!(has_scheme("https://x") && has_scheme("mailto:a@b") && !has_scheme("docs/a.md"));
    assert_eq!(percent_decode("a%20b"), "a b");
    assert!(flag_matches(
        "leader-election-*",
        ["leader-election-retry-period"].into_iter()
    ));
    assert!(!flag_matches("tag", ["tags"].into_iter()));
    assert!(contains_word("x --tag T", "--tag") && !contains_word("--tags", "--tag"));
}
