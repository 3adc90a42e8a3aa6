//! The watches: a reflector store per kind the plan reads, and the snapshot of a pass.

use super::*;

#[derive(Clone)]
pub(super) struct WatchCtx {
    pub(super) notify: Arc<Notify>,
    pub(super) handle: Handle,
}

impl WatchCtx {
    pub(super) fn watch<K>(
        &self,
        tasks: &mut tokio::task::JoinSet<()>,
        api: Api<K>,
        config: watcher::Config,
        kind: &'static str,
    ) -> Store<K>
    where
        K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
        K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
    {
        self.watch_slim(tasks, api, config, kind, |_| {})
    }

    /// [`Self::watch`], keeping each object as `slim` leaves it.
    pub(super) fn watch_slim<K>(
        &self,
        tasks: &mut tokio::task::JoinSet<()>,
        api: Api<K>,
        config: watcher::Config,
        kind: &'static str,
        slim: fn(&mut K),
    ) -> Store<K>
    where
        K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
        K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
    {
        let writer = reflector::store::Writer::default();
        let reader = writer.as_reader();
        self.spawn(tasks, writer, api, config, kind, slim, false);
        reader
    }

    /// [`Self::watch`] of a kind the manager can do without (this project's own
    /// ScoreDefinition): while the apiserver does not serve it (a hub upgraded without the
    /// chart's `crds/`) or this identity may not read it, the watch counts as synced with
    /// nothing in it, and keeps trying; once it lists, its objects arrive as usual.
    pub(super) fn watch_optional<K>(
        &self,
        tasks: &mut tokio::task::JoinSet<()>,
        api: Api<K>,
        config: watcher::Config,
        kind: &'static str,
    ) -> Store<K>
    where
        K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
        K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
    {
        let writer = reflector::store::Writer::default();
        let reader = writer.as_reader();
        self.spawn(tasks, writer, api, config, kind, |_| {}, true);
        reader
    }

    // The one driver of every watch: its arguments are what differs between them.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn spawn<K>(
        &self,
        tasks: &mut tokio::task::JoinSet<()>,
        writer: reflector::store::Writer<K>,
        api: Api<K>,
        config: watcher::Config,
        kind: &'static str,
        slim: fn(&mut K),
        optional: bool,
    ) where
        K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
        K::DynamicType: Eq + Hash + Clone + Send + Sync,
    {
        self.handle.sync.started(kind, api.resource_url());
        let ctx = self.clone();
        tasks.spawn(async move {
            // managedFields are half of an object as served and nothing here reads them.
            let events = watcher::watcher(api, config)
                .backoff(ocm_runtime::watch::backoff())
                .modify(move |o| {
                    o.managed_fields_mut().clear();
                    slim(o);
                });
            let stream = reflector::reflector(writer, events);
            futures::pin_mut!(stream);
            let mut synced = false;
            loop {
                match stream.try_next().await {
                    Ok(Some(event)) => {
                        if matches!(event, Event::InitDone) && !synced {
                            synced = true;
                            ctx.handle.sync.synced(kind);
                            tracing::info!(kind, "watch synced");
                        }
                        if !matches!(event, Event::Init | Event::InitApply(_)) {
                            ctx.notify.notify_one();
                        }
                    }
                    Ok(None) => break,
                    Err(e) if optional && !synced && not_served_or_forbidden(&e) => {
                        synced = true;
                        ctx.handle.sync.synced(kind);
                        tracing::warn!(kind, error = %e, "not served or not readable: going on without it, and trying again");
                    }
                    Err(e) => {
                        tracing::warn!(kind, error = %e, "watch failed; retrying");
                        ctx.handle.sync.failed(kind, &e);
                        ctx.handle
                            .metrics
                            .watch_errors
                            .get_or_create(&KindLabels { kind: kind.into() })
                            .inc();
                    }
                }
            }
        });
    }
}

/// A 404 (the kind is not served) or a 403 (this identity may not list it).
fn not_served_or_forbidden(e: &watcher::Error) -> bool {
    match e {
        watcher::Error::InitialListFailed(kube::Error::Api(s))
        | watcher::Error::WatchStartFailed(kube::Error::Api(s)) => s.code == 404 || s.code == 403,
        _ => false,
    }
}

pub(super) fn by_namespace<K>(store: &Store<K>, name: &str) -> BTreeMap<String, Arc<K>>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + Hash + Clone,
{
    store
        .state()
        .into_iter()
        .filter(|o| o.meta().name.as_deref() == Some(name))
        .filter_map(|o| Some((o.meta().namespace.clone()?, o)))
        .collect()
}

pub(super) fn snapshot(
    stores: &Stores,
    settings: &Settings,
    errors: &BTreeMap<(String, Step), String>,
    deployed_configs: &BTreeMap<String, (ConfigKey, String)>,
    now: jiff::Timestamp,
) -> Snapshot {
    let configs = stores
        .configs
        .state()
        .into_iter()
        .filter_map(|o| {
            let key = ConfigKey {
                namespace: o.metadata.namespace.clone()?,
                name: o.metadata.name.clone()?,
            };
            let spec = o
                .data
                .get("spec")
                .cloned()
                .map(serde_json::from_value::<AddOnDeploymentConfigSpec>)
                .unwrap_or_else(|| Ok(AddOnDeploymentConfigSpec::default()))
                .map_err(|e| e.to_string());
            let hash = render::config_spec_hash(&o.data);
            Some((key, Config { spec, hash }))
        })
        .collect();
    let permission = settings.permission_name();
    Snapshot {
        cma: stores
            .cma
            .state()
            .into_iter()
            .find(|c| c.metadata.name.as_deref() == Some(settings.addon.as_str())),
        mcas: by_namespace(&stores.mcas, &settings.addon),
        decisions: stores.decisions.state(),
        clusters: stores
            .clusters
            .state()
            .into_iter()
            .filter_map(|c| Some((c.metadata.name.clone()?, c)))
            .collect(),
        placements: stores
            .placements
            .state()
            .into_iter()
            .filter_map(|p| Some(((p.metadata.namespace.clone()?, p.metadata.name.clone()?), p)))
            .collect(),
        configs,
        works: by_namespace(&stores.works, &settings.work_name()),
        roles: by_namespace(&stores.roles, &permission),
        bindings: by_namespace(&stores.bindings, &permission),
        csrs: stores.csrs.state(),
        errors: errors.clone(),
        deployed_configs: deployed_configs.clone(),
        definitions: stores.definitions.state(),
        // Whole seconds: the API server keeps condition times to the second, and a pass over
        // an unchanged hub must compare equal to what it wrote.
        // The pass's time, whole seconds (as conditions store it): the planner reads no clock.
        now: jiff::Timestamp::from_second(now.as_second()).unwrap_or(now),
    }
}

impl WatchCtx {
    /// Starts a watch per kind the plan reads (this add-on's objects by name or label); their
    /// stores.
    pub(super) fn watch_all(
        &self,
        tasks: &mut tokio::task::JoinSet<()>,
        client: &Client,
        addon: &str,
    ) -> Stores {
        let ctx = self;
        let by_name = watcher::Config::default().fields(&format!("metadata.name={}", addon));
        let by_label =
            watcher::Config::default().labels(&format!("{}={}", label::ADDON_NAME, addon));
        Stores {
            cma: ctx.watch(
                tasks,
                Api::all(client.clone()),
                by_name.clone(),
                "ClusterManagementAddOn",
            ),
            mcas: ctx.watch(
                tasks,
                Api::all(client.clone()),
                by_name,
                "ManagedClusterAddOn",
            ),
            decisions: ctx.watch(
                tasks,
                Api::all(client.clone()),
                watcher::Config::default(),
                "PlacementDecision",
            ),
            placements: ctx.watch(
                tasks,
                Api::all(client.clone()),
                watcher::Config::default(),
                "Placement",
            ),
            clusters: ctx.watch(
                tasks,
                Api::all(client.clone()),
                watcher::Config::default(),
                "ManagedCluster",
            ),
            configs: {
                let ar = ApiResource::erase::<AddOnDeploymentConfig>(&());
                let writer = reflector::store::Writer::new(ar.clone());
                let reader = writer.as_reader();
                ctx.spawn(
                    tasks,
                    writer,
                    Api::<DynamicObject>::all_with(client.clone(), &ar),
                    watcher::Config::default(),
                    "AddOnDeploymentConfig",
                    |_| {},
                    false,
                );
                reader
            },
            works: ctx.watch_slim(
                tasks,
                Api::all(client.clone()),
                by_label.clone(),
                "ManifestWork",
                plan::slim_work,
            ),
            roles: ctx.watch(tasks, Api::all(client.clone()), by_label.clone(), "Role"),
            bindings: ctx.watch(
                tasks,
                Api::all(client.clone()),
                by_label.clone(),
                "RoleBinding",
            ),
            csrs: ctx.watch(
                tasks,
                Api::all(client.clone()),
                by_label,
                "CertificateSigningRequest",
            ),
            definitions: ctx.watch_optional(
                tasks,
                Api::all(client.clone()),
                watcher::Config::default(),
                "ScoreDefinition",
            ),
        }
    }
}
