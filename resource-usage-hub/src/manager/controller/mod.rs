//! The thin part: watch what the plan reads into stores, run a pass after each burst of
//! events (and when a rollout timeout or a retry is due), write what the pass planned.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::future::Future;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use futures::TryStreamExt;
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestCondition,
};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher::{self, Event};
use kube::{Client, Resource, ResourceExt};
use ocm_api::ManagedCluster;
use ocm_api::addon::v1alpha1::{
    AddOnDeploymentConfig, AddOnDeploymentConfigSpec, ClusterManagementAddOn, ManagedClusterAddOn,
};
use ocm_api::cluster::v1beta1::{Placement, PlacementDecision};
use ocm_api::wellknown::label;
use ocm_api::work::v1::ManifestWork;
use ocm_runtime::Leadership;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use serde::de::DeserializeOwned;
use serde_json::json;
use tokio::sync::Notify;

use super::plan::install::ConfigKey;
use super::plan::{self, Action, Config, Settings, Snapshot, Step};
use super::render;

mod execute;
mod reporter;
mod watch;

use execute::write_plan;
pub use reporter::Reporter;
use watch::{WatchCtx, snapshot};

/// The field manager of every write.
pub const MANAGER: &str = "resource-usage-hub";

/// How the controller runs.
pub struct Options {
    pub settings: Settings,
    /// Events within this long make one pass.
    pub debounce: Duration,
    /// A pass at least this often even without events.
    pub resync: Duration,
    /// Who may write, asked before every pass and every write ([`Leadership::always`]
    /// without election).
    pub leadership: Leadership,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ActionLabels {
    pub action: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    pub kind: String,
}

/// `cache`: which per-object map (names fixed in the code).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CacheLabels {
    pub cache: &'static str,
}

/// `addon_manager_*` metrics.
pub struct Metrics {
    pub passes: Counter,
    pub pass_seconds: Histogram,
    pub writes: Family<ActionLabels, Counter>,
    pub write_errors: Family<ActionLabels, Counter>,
    pub watch_errors: Family<KindLabels, Counter>,
    /// ManagedClusterAddOns whose `configReferences` named a config the hub does not assign
    /// to their cluster (each refused reference once).
    pub config_refusals: Counter,
    /// ManagedClusterAddOns of this add-on.
    pub addons: Gauge,
    /// Entries in the per-object maps kept between passes (`renders`, `csr_requests`,
    /// `csr_refusals`, `config_refusals`, `deployed_configs`): they follow the objects on the
    /// hub.
    pub cache_entries: Family<CacheLabels, Gauge>,
}

impl Metrics {
    pub fn new(registry: &mut prometheus_client::registry::Registry) -> Self {
        let m = Self {
            passes: Counter::default(),
            pass_seconds: Histogram::new([0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 30.0]),
            writes: Family::default(),
            write_errors: Family::default(),
            watch_errors: Family::default(),
            config_refusals: Counter::default(),
            addons: Gauge::default(),
            cache_entries: Family::default(),
        };
        let r = registry.sub_registry_with_prefix("addon_manager");
        r.register("passes", "Reconcile passes run", m.passes.clone());
        r.register(
            "pass_duration_seconds",
            "Time to plan and write one pass",
            m.pass_seconds.clone(),
        );
        r.register("writes", "Writes to the hub by action", m.writes.clone());
        r.register(
            "write_errors",
            "Failed writes by action (retried on the next pass)",
            m.write_errors.clone(),
        );
        r.register(
            "watch_errors",
            "Watch failures by kind (the watch retries with backoff)",
            m.watch_errors.clone(),
        );
        r.register(
            "config_references_refused",
            "Add-ons whose configReferences named a config the hub does not assign to their \
             cluster (not deployed; each refused reference counted once)",
            m.config_refusals.clone(),
        );
        r.register(
            "managed_cluster_addons",
            "ManagedClusterAddOns of this add-on",
            m.addons.clone(),
        );
        r.register(
            "cache_entries",
            "Entries in the manager's per-object maps, by map",
            m.cache_entries.clone(),
        );
        m
    }

    fn cache(&self, cache: &'static str, n: usize) {
        self.cache_entries
            .get_or_create(&CacheLabels { cache })
            .set(i64::try_from(n).unwrap_or(i64::MAX));
    }
}

/// What the controller shares with main (readiness, metrics).
#[derive(Clone)]
pub struct Handle {
    pub metrics: Arc<Metrics>,
    /// Which watches have listed, and why not: what `/readyz` says.
    pub sync: ocm_runtime::WatchSync,
}

/// The number of watches; ready when each has listed once.
const WATCHES: usize = 11;

impl Handle {
    pub fn new(registry: &mut prometheus_client::registry::Registry) -> Self {
        Self {
            metrics: Arc::new(Metrics::new(registry)),
            sync: ocm_runtime::WatchSync::new(WATCHES),
        }
    }

    /// Every watch has listed once.
    pub fn ready(&self) -> bool {
        self.sync.not_ready().is_none()
    }
}

struct Stores {
    cma: Store<ClusterManagementAddOn>,
    mcas: Store<ManagedClusterAddOn>,
    decisions: Store<PlacementDecision>,
    placements: Store<Placement>,
    clusters: Store<ManagedCluster>,
    configs: Store<DynamicObject>,
    works: Store<ManifestWork>,
    roles: Store<Role>,
    bindings: Store<RoleBinding>,
    csrs: Store<CertificateSigningRequest>,
    definitions: Store<ocm_api::scoring::ScoreDefinition>,
}

/// Runs the manager until `shutdown` completes.
pub async fn run(
    client: Client,
    handle: Handle,
    options: Options,
    shutdown: impl Future<Output = ()>,
) {
    let settings = &options.settings;
    let notify = Arc::new(Notify::new());
    let mut tasks = tokio::task::JoinSet::new();
    let ctx = WatchCtx {
        notify: notify.clone(),
        handle: handle.clone(),
    };
    let stores = ctx.watch_all(&mut tasks, &client, &settings.addon);
    tracing::info!(addon = %settings.addon, image = %settings.template.image, "add-on manager starting");

    let mut errors: BTreeMap<(String, Step), String> = BTreeMap::new();
    // The config each cluster's `configReferences` named when a pass last deployed it.
    let mut deployed_configs: BTreeMap<String, (ConfigKey, String)> = BTreeMap::new();
    let mut renders = plan::Renders::default();
    let mut failures: u32 = 0;
    let mut refusals = Reporter::new(client.clone(), MANAGER);
    let mut next = options.resync;
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            _ = notify.notified() => {}
            _ = tokio::time::sleep(next) => {}
        }
        tokio::select! {
            _ = &mut shutdown => break,
            _ = tokio::time::sleep(options.debounce) => {}
        }
        next = options.resync;
        if !handle.ready() || !options.leadership.is_leader() {
            // Look again soon: becoming ready or the leader is no event of its own.
            next = Duration::from_millis(500);
            continue;
        }
        let started = std::time::Instant::now();
        let snap = snapshot(
            &stores,
            settings,
            &errors,
            &deployed_configs,
            jiff::Timestamp::now(),
        );
        handle.metrics.addons.set(snap.mcas.len() as i64);
        let planned = plan::plan_with(settings, &snap, &mut renders);
        for w in &planned.warnings {
            tracing::warn!("{w}");
        }
        refusals.report(&planned.refused_csrs).await;
        refusals
            .report_configs(&planned.refused_configs, &handle.metrics.config_refusals)
            .await;
        deployed_configs.retain(|c, _| snap.mcas.contains_key(c));
        deployed_configs.extend(planned.deployed_configs.clone());
        let (rendered, requests) = renders.sizes();
        handle.metrics.cache("renders", rendered);
        handle.metrics.cache("csr_requests", requests);
        handle.metrics.cache("csr_refusals", refusals.len());
        handle
            .metrics
            .cache("config_refusals", refusals.configs_len());
        handle
            .metrics
            .cache("deployed_configs", deployed_configs.len());
        // A failure is reported until the write succeeds or is no longer needed.
        let before = errors.len();
        errors.retain(|(c, s), _| {
            planned
                .actions
                .iter()
                .any(|a| a.cluster() == Some(c.as_str()) && step_of(a) == Some(*s))
        });
        if errors.len() != before {
            // Their conditions change on the next pass; make sure there is one.
            next = options.debounce;
        }
        let failed = write_plan(
            &client,
            &options,
            &handle,
            planned.actions,
            &snap,
            &mut errors,
        )
        .await;
        handle.metrics.passes.inc();
        handle
            .metrics
            .pass_seconds
            .observe(started.elapsed().as_secs_f64());
        if failed {
            failures = failures.saturating_add(1);
            next = next.min(Duration::from_secs(1 << failures.min(5)));
        } else {
            failures = 0;
        }
        if let Some(r) = planned.recheck_after {
            // A hair after the deadline, so the rollout sees it passed.
            next = next.min(r + Duration::from_millis(100));
        }
    }
    tracing::info!("add-on manager stopping");
    tasks.shutdown().await;
}

/// The step whose failure a write reports.
fn step_of(action: &Action) -> Option<Step> {
    match action {
        Action::ApplyRoleBinding(_) => Some(Step::Permission),
        Action::ApplyWork(_) => Some(Step::Work),
        _ => None,
    }
}
