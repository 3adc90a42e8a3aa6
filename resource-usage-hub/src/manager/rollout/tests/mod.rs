//! The rollout's table tests, most of them upstream's cases (`rollout_test.go`), grouped by
//! what they decide. Helpers here build groups, statuses and strategies tersely.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use ocm_api::addon::v1alpha1::{RolloutAll, RolloutProgressive, RolloutProgressivePerGroup};
use ocm_api::cluster::v1beta1::{
    ClusterDecision, PlacementDecisionFields, PlacementDecisionStatus,
};

use super::Status::{Failed, Progressing, Skip, Succeeded, TimeOut, ToApply};
use super::decide::*;
use super::strategy::*;
use super::*;

/// Upstream's fakeTime, 2022-01-01T00:00:00Z: every test runs "now".
const T0: i64 = 1_640_995_200;

fn at(offset_secs: i64) -> Timestamp {
    Timestamp::from_second(T0 + offset_secs).unwrap()
}

fn now() -> Timestamp {
    at(0)
}

fn k(index: i32, name: &str) -> GroupKey {
    GroupKey::new(index, name)
}

/// upstream's `{GroupName: "group1", GroupIndex: 0}`
fn g1() -> Option<GroupKey> {
    Some(k(0, "group1"))
}

/// An unnamed group.
fn gi(index: i32) -> Option<GroupKey> {
    Some(k(index, ""))
}

fn name(n: u32) -> String {
    format!("cluster{n}")
}

/// Groups from `(index, name, cluster numbers)`.
fn groups(spec: &[(i32, &str, &[u32])]) -> Groups {
    let mut groups = Groups::default();
    for (index, group, clusters) in spec {
        groups.insert_group(k(*index, group));
        for n in *clusters {
            groups.insert(k(*index, group), name(*n));
        }
    }
    groups
}

/// ToApply without times (a new cluster, or upstream's `waiting` workload).
fn t(n: u32, group: Option<GroupKey>) -> ClusterStatus {
    ClusterStatus {
        cluster: name(n),
        group,
        status: ToApply,
        last_transition: None,
        recheck_at: None,
    }
}

/// An existing status whose last transition was `ltt` seconds from now.
fn s(n: u32, group: Option<GroupKey>, status: Status, ltt: i64) -> ClusterStatus {
    ClusterStatus {
        status,
        last_transition: Some(at(ltt)),
        ..t(n, group)
    }
}

/// Like [`s`], rechecked at `recheck` seconds from now.
fn r(n: u32, group: Option<GroupKey>, status: Status, ltt: i64, recheck: i64) -> ClusterStatus {
    ClusterStatus {
        recheck_at: Some(at(recheck)),
        ..s(n, group, status, ltt)
    }
}

fn res(
    to_rollout: Vec<ClusterStatus>,
    timed_out: Vec<ClusterStatus>,
    removed: Vec<ClusterStatus>,
    max_failure_breach: bool,
    recheck_after_secs: Option<u64>,
) -> RolloutResult {
    RolloutResult {
        to_rollout,
        timed_out,
        removed,
        max_failure_breach,
        recheck_after: recheck_after_secs.map(Duration::from_secs),
    }
}

fn int(n: i32) -> Option<IntOrString> {
    Some(IntOrString::Int(n))
}

fn pct(v: &str) -> Option<IntOrString> {
    Some(IntOrString::String(v.to_owned()))
}

fn cfg(deadline: &str, max_failures: Option<IntOrString>, min_success: &str) -> RolloutConfig {
    RolloutConfig {
        min_success_time: min_success.to_owned(),
        progress_deadline: deadline.to_owned(),
        max_failures,
    }
}

fn by_name(name: &str) -> MandatoryDecisionGroup {
    MandatoryDecisionGroup {
        group_name: name.to_owned(),
        group_index: 0,
    }
}

fn by_index(index: i32) -> MandatoryDecisionGroup {
    MandatoryDecisionGroup {
        group_name: String::new(),
        group_index: index,
    }
}

fn all(deadline: &str) -> RolloutStrategy {
    RolloutStrategy {
        type_: "All".into(),
        all: Some(RolloutAll {
            rollout_config: cfg(deadline, None, ""),
        }),
        ..RolloutStrategy::default()
    }
}

fn prog(
    config: RolloutConfig,
    max_concurrency: Option<IntOrString>,
    mandatory: &[MandatoryDecisionGroup],
) -> RolloutStrategy {
    RolloutStrategy {
        type_: "Progressive".into(),
        progressive: Some(RolloutProgressive {
            rollout_config: config,
            mandatory_decision_groups: mandatory.to_vec(),
            max_concurrency,
        }),
        ..RolloutStrategy::default()
    }
}

fn ppg(config: RolloutConfig, mandatory: &[MandatoryDecisionGroup]) -> RolloutStrategy {
    RolloutStrategy {
        type_: "ProgressivePerGroup".into(),
        progressive_per_group: Some(RolloutProgressivePerGroup {
            rollout_config: config,
            mandatory_decision_groups: mandatory.to_vec(),
        }),
        ..RolloutStrategy::default()
    }
}

struct Case {
    name: &'static str,
    strategy: RolloutStrategy,
    groups: Groups,
    existing: Vec<ClusterStatus>,
    want: RolloutResult,
}

fn check(cases: Vec<Case>) {
    for c in cases {
        let strategy = Strategy::parse(&c.strategy).unwrap_or_else(|e| panic!("{}: {e}", c.name));
        let got = rollout(&strategy, &c.groups, &c.existing, now());
        assert_eq!(got, c.want, "{}", c.name);
    }
}

/// group1 (index 0): 1, 2, 3; index 1: 4, 5, 6.
fn g_3_3() -> Groups {
    groups(&[(0, "group1", &[1, 2, 3]), (1, "", &[4, 5, 6])])
}

/// [`g_3_3`] and index 2: 7, 8, 9.
fn g_3_3_3() -> Groups {
    groups(&[
        (0, "group1", &[1, 2, 3]),
        (1, "", &[4, 5, 6]),
        (2, "", &[7, 8, 9]),
    ])
}

/// group1 (index 0): 1, 2; index 1: 3, 4, 5, 6.
fn g_2_4() -> Groups {
    groups(&[(0, "group1", &[1, 2]), (1, "", &[3, 4, 5, 6])])
}

/// group1 (index 0): 1, 2; index 1: 3, 4; index 2: 5, 6.
fn g_2_2_2() -> Groups {
    groups(&[(0, "group1", &[1, 2]), (1, "", &[3, 4]), (2, "", &[5, 6])])
}

/// upstream's "test rollout all with timeout 90s" workloads.
fn all_existing() -> Vec<ClusterStatus> {
    vec![
        s(1, g1(), Succeeded, -60),
        s(2, g1(), Failed, -120),
        s(3, gi(1), Progressing, -120),
        s(4, gi(1), Failed, -60),
        s(5, gi(1), Progressing, -60),
    ]
}

/// Progressing, ToApply ×8 and a removed cluster10 (upstream's ToApply cases).
fn to_apply_existing() -> Vec<ClusterStatus> {
    vec![
        s(1, g1(), Progressing, -60),
        t(2, g1()),
        t(3, g1()),
        t(4, gi(1)),
        t(5, gi(1)),
        t(6, gi(1)),
        t(7, gi(2)),
        t(8, gi(2)),
        t(9, gi(2)),
        t(10, gi(2)),
    ]
}

/// cluster1 Succeeded 60s ago, cluster2 Failed 120s ago, cluster3 `third`.
fn first_group(third: Status, third_ltt: i64) -> Vec<ClusterStatus> {
    vec![
        s(1, g1(), Succeeded, -60),
        s(2, g1(), Failed, -120),
        s(3, g1(), third, third_ltt),
    ]
}

mod all_and_progressive;
mod groups;
mod parse;
mod per_group;
