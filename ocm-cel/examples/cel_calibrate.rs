//! Units per second: how much wall time one budget unit buys, for expressions whose work lies
//! in different places (comprehension iterations, `in` on a list literal, string operations,
//! list and map building, nesting). The budget is fair when these are within a small factor of
//! each other: then the cost budget bounds time whatever the expression.
//!
//! ```sh
//! cargo run --release -p ocm-cel --example cel_calibrate
//! ```
//!
//! Each expression is evaluated repeatedly for about half a second without a deadline; the
//! units are what the selector drew from its pool (each evaluation is capped at upstream's
//! per-call limit, so an expression that runs out is measured up to the limit).

use std::time::{Duration, Instant};

use ocm_api::{AddOnPlacementScoreItem, ManagedCluster};
use ocm_cel::{CelCluster, CelSelector, ScoreSource};

struct NoScores;

impl ScoreSource for NoScores {
    fn scores(&self, _: &str, _: &str) -> Option<Vec<AddOnPlacementScoreItem>> {
        None
    }
}

fn ints(n: usize) -> String {
    format!(
        "[{}]",
        (0..n).map(|i| i.to_string()).collect::<Vec<_>>().join(",")
    )
}

fn main() {
    let cluster: ManagedCluster = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "cluster1", "labels": {"env": "prod"}},
        "spec": {"hubAcceptsClient": true}
    }))
    .expect("cluster");
    let cluster = CelCluster::new(&cluster);
    let (l10, l100, big) = (ints(10), ints(100), ints(15_000));
    let s = "x".repeat(20_000);
    let strs = format!(
        "[{}]",
        (0..2_000)
            .map(|i| format!("'name-{i:05}'"))
            .collect::<Vec<_>>()
            .join(",")
    );
    let name = "managedCluster.metadata.name";
    let cases: Vec<(&str, String)> = vec![
        (
            "loop 100x100",
            format!("{l100}.all(a, {l100}.all(b, a + b >= 0))"),
        ),
        (
            "loop 100^3",
            format!("{l100}.all(a, {l100}.all(b, {l100}.all(c, c >= 0)))"),
        ),
        (
            "in 15k-int literal",
            format!("{l10}.all(a, {l10}.all(b, !(-1 in {big})))"),
        ),
        (
            "in 2k-string literal",
            format!("{l100}.all(a, !({name} in {strs}))"),
        ),
        (
            "exists on 15k literal",
            format!("{l10}.all(a, !{big}.exists(x, x < 0))"),
        ),
        (
            "string literal concat",
            format!("{l100}.all(a, {l100}.all(b, size('{s}' + '{s}') > 0))"),
        ),
        (
            "string concat",
            format!("{l100}.all(a, {l100}.all(b, size({name} + '{s}') > 0))"),
        ),
        (
            "contains literal",
            format!("{l100}.all(a, {l100}.all(b, !'{s}'.contains('y')))"),
        ),
        (
            "== literals",
            format!("{l100}.all(a, {l100}.all(b, '{s}' != '{s}y'))"),
        ),
        (
            "startsWith",
            format!("{l100}.all(a, {l100}.all(b, !'{s}'.startsWith('{s}y')))"),
        ),
        (
            "matches",
            format!("{l100}.all(a, {l100}.all(b, '{s}'.matches('^x+$')))"),
        ),
        (
            "split",
            format!(
                "{l100}.all(a, size('{}'.split(',')) > 0)",
                "a,".repeat(5_000)
            ),
        ),
        (
            "list building",
            format!("{l100}.map(a, {l100}.map(b, [a, b, a])).size() > 0"),
        ),
        (
            "map building",
            format!("{l100}.map(a, {l100}.map(b, {{'a': a, 'b': b}})).size() > 0"),
        ),
        (
            "list literal of strings",
            format!("{l100}.all(a, size({strs}) > 0)"),
        ),
        (
            "filter",
            format!("{l100}.all(a, {l100}.filter(b, b > a).size() >= 0)"),
        ),
    ];
    println!(
        "{:<26} {:>12} {:>12} {:>14}",
        "expression", "units", "time", "units/s"
    );
    for (label, expression) in cases {
        let selector = match CelSelector::compile(std::slice::from_ref(&expression)) {
            Ok(s) => s,
            Err(e) => {
                println!("{label:<26} compile error: {e:?}");
                continue;
            }
        };
        let started = Instant::now();
        let mut units = 0u64;
        while started.elapsed() < Duration::from_millis(500) {
            let mut pool = u64::MAX;
            let _ = selector.matches_within(&cluster, &NoScores, &mut pool, &());
            units += u64::MAX - pool;
        }
        let t = started.elapsed();
        println!(
            "{label:<26} {units:>12} {:>12.3?} {:>14.0}",
            t,
            units as f64 / t.as_secs_f64()
        );
    }
}
