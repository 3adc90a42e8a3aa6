//! One control plane per run: the hub the controller schedules, the fleet and placements the
//! harness creates on it (counting its own requests, to subtract from the apiserver's).

use super::*;

pub(crate) struct Hub {
    // Dropped last (declared last in the users' structs is not enough: hold it here and drop
    // the controller first explicitly).
    pub(crate) cp: testenv::ControlPlane,
    pub(crate) client: Client,
    pub(crate) ns: String,
    pub(crate) set: String,
    /// The namespaces our controller schedules (`--namespaces`): `ns` unless a scenario
    /// spreads its placements wider.
    pub(crate) scope: Vec<String>,
    pub(crate) kubeconfig: PathBuf,
    pub(crate) started_in: Duration,
    /// Requests the harness made, by (VERB, resource), to subtract from the apiserver's count.
    pub(crate) harness: Arc<Mutex<BTreeMap<(String, String), f64>>>,
}

impl Hub {
    pub(crate) async fn start(env: &Env<'_>, name: &str) -> Result<Hub> {
        let t = Instant::now();
        eprintln!("[{name}] starting etcd and kube-apiserver with the upstream CRDs");
        let cp = testenv::ControlPlane::start(testenv::Options::default().with_upstream_crds())
            .await
            .map_err(|e| format!("cannot start the control plane: {e}"))?;
        let client = cp.client()?;
        if env.args.ocm_1_2_crds {
            eprintln!("[{name}] serving OCM 1.2's CRDs (no score fields)");
            testenv::crds::as_ocm_1_2(&client, |doc| {
                placement_scheduler::controller::schema::from_document(doc)
                    == Some(placement_core::ScoreFields::Absent)
            })
            .await
            .map_err(|e| format!("cannot serve OCM 1.2's CRDs: {e}"))?;
        }
        let kubeconfig = env.work_dir.join(format!("{name}.kubeconfig"));
        cp.write_kubeconfig(&kubeconfig)?;
        let hub = Hub {
            cp,
            client,
            ns: name.to_owned(),
            set: name.to_owned(),
            scope: vec![name.to_owned()],
            kubeconfig,
            started_in: t.elapsed(),
            harness: Arc::default(),
        };
        retry(|| {
            let api: Api<Namespace> = Api::all(hub.client.clone());
            let ns: Namespace =
                serde_json::from_value(json!({"metadata": {"name": hub.ns}})).unwrap_or_default();
            async move { api.create(&PostParams::default(), &ns).await.map(drop) }
        })
        .await?;
        hub.apply_all::<ManagedClusterSet>(
            &hub.set,
            json!({"spec": {"clusterSelector": {"selectorType": "ExclusiveClusterSetLabel"}}}),
        )
        .await?;
        hub.apply_ns::<ManagedClusterSetBinding>(
            &hub.ns,
            &hub.set,
            json!({"spec": {"clusterSet": hub.set}}),
        )
        .await?;
        Ok(hub)
    }

    pub(crate) fn count(&self, verb: &str, resource: &str, n: f64) {
        let mut h = self.harness.lock();
        *h.entry((verb.to_owned(), resource.to_owned()))
            .or_insert(0.0) += n;
    }

    pub(crate) fn harness_requests(&self) -> BTreeMap<(String, String), f64> {
        self.harness.lock().clone()
    }

    /// Server-side apply of a cluster-scoped object.
    pub(crate) async fn apply_all<K>(&self, name: &str, body: Value) -> Result<()>
    where
        K: Resource<DynamicType = (), Scope = kube::core::ClusterResourceScope>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
    {
        let api: Api<K> = Api::all(self.client.clone());
        let obj = typed_body::<K>(name, None, body);
        let (pp, patch) = (
            PatchParams::apply(FIELD_MANAGER).force(),
            Patch::Apply(&obj),
        );
        retry(|| api.patch(name, &pp, &patch)).await?;
        Ok(())
    }

    /// Server-side apply of a namespaced object.
    pub(crate) async fn apply_ns<K>(&self, ns: &str, name: &str, body: Value) -> Result<()>
    where
        K: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
    {
        let api: Api<K> = Api::namespaced(self.client.clone(), ns);
        let obj = typed_body::<K>(name, Some(ns), body);
        let (pp, patch) = (
            PatchParams::apply(FIELD_MANAGER).force(),
            Patch::Apply(&obj),
        );
        retry(|| api.patch(name, &pp, &patch)).await?;
        Ok(())
    }

    pub(crate) async fn apiserver_metrics(&self) -> Result<Vec<Sample>> {
        scrape::apiserver(&self.client)
            .await
            .map_err(|e| format!("apiserver /metrics: {e}").into())
    }

    /// Creates `n` clusters `cluster-00000`... in the set, each with a namespace and an
    /// AddOnPlacementScore `demo` (item `demo`) with no `validUntil`: an administrator's static
    /// score, which never expires in either controller. (A far `validUntil` counts in ours
    /// only for `--max-score-validity`, 10 minutes, after it was written: a run longer than
    /// that, with scores written once, would see every score end and every placement move.)
    pub(crate) async fn create_fleet(
        &self,
        n: usize,
        concurrency: usize,
        labels: impl Fn(usize) -> BTreeMap<String, String>,
        score: impl Fn(usize) -> i64,
    ) -> Result<()> {
        let done = AtomicU64::new(0);
        let t = Instant::now();
        futures::stream::iter(0..n)
            .map(|i| {
                let mut l = labels(i);
                l.insert(CLUSTERSET_LABEL.into(), self.set.clone());
                let value = score(i);
                let done = &done;
                async move {
                    let name = cluster_name(i);
                    self.apply_all::<ManagedCluster>(
                        &name,
                        json!({"metadata": {"labels": l}, "spec": {"hubAcceptsClient": true}}),
                    )
                    .await?;
                    let ns_api: Api<Namespace> = Api::all(self.client.clone());
                    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}}))
                        .unwrap_or_default();
                    let post = PostParams::default();
                    match retry(|| ns_api.create(&post, &ns)).await {
                        Ok(_) => {}
                        Err(kube::Error::Api(s)) if s.code == 409 => {}
                        Err(e) => return Err(BoxError::from(e)),
                    }
                    self.apply_ns::<AddOnPlacementScore>(&name, "demo", json!({}))
                        .await?;
                    set_score(&self.client, &name, value, None).await?;
                    let k = done.fetch_add(1, Ordering::Relaxed) + 1;
                    if k.is_multiple_of(250) {
                        eprintln!("  {k}/{n} clusters with scores ({:.0?})", t.elapsed());
                    }
                    Ok::<(), BoxError>(())
                }
            })
            .buffer_unordered(concurrency.max(1))
            .try_collect::<()>()
            .await
    }

    /// Creates the placements `p-00000`... concurrently; each one's spec from `spec(i)`.
    pub(crate) async fn create_placements(
        &self,
        m: usize,
        concurrency: usize,
        spec: impl Fn(usize) -> Value,
    ) -> Result<()> {
        self.create_placements_annotated(m, concurrency, &BTreeMap::new(), spec)
            .await
    }

    /// [`Hub::create_placements`], each placement with `annotations` (none: no annotations).
    pub(crate) async fn create_placements_annotated(
        &self,
        m: usize,
        concurrency: usize,
        annotations: &BTreeMap<String, String>,
        spec: impl Fn(usize) -> Value,
    ) -> Result<()> {
        let api: Api<Placement> = Api::namespaced(self.client.clone(), &self.ns);
        futures::stream::iter(0..m)
            .map(|i| {
                let mut metadata = json!({"name": placement_name(i), "namespace": self.ns});
                if !annotations.is_empty() {
                    metadata["annotations"] = json!(annotations);
                }
                let p: Result<Placement, _> = serde_json::from_value(json!({
                    "metadata": metadata,
                    "spec": spec(i),
                }));
                let api = api.clone();
                async move {
                    let p = p?;
                    let post = PostParams::default();
                    retry(|| api.create(&post, &p)).await?;
                    self.count("POST", "placements", 1.0);
                    Ok::<(), BoxError>(())
                }
            })
            .buffer_unordered(concurrency.max(1))
            .try_collect::<()>()
            .await
    }
}

pub(crate) fn typed_body<K: Resource<DynamicType = ()>>(
    name: &str,
    ns: Option<&str>,
    mut body: Value,
) -> Value {
    body["apiVersion"] = json!(K::api_version(&()));
    body["kind"] = json!(K::kind(&()));
    body["metadata"]["name"] = json!(name);
    if let Some(ns) = ns {
        body["metadata"]["namespace"] = json!(ns);
    }
    body
}

pub(crate) async fn set_score(
    client: &Client,
    cluster: &str,
    value: i64,
    valid_until: Option<&str>,
) -> Result<()> {
    let api: Api<AddOnPlacementScore> = Api::namespaced(client.clone(), cluster);
    let mut status = json!({"status": {"scores": [{"name": "demo", "value": value}]}});
    if let Some(t) = valid_until {
        status["status"]["validUntil"] = json!(t);
    }
    let (pp, patch) = (PatchParams::default(), Patch::Merge(&status));
    retry(|| api.patch_status("demo", &pp, &patch)).await?;
    Ok(())
}

pub(crate) fn cluster_name(i: usize) -> String {
    format!("cluster-{i:05}")
}

pub(crate) fn placement_name(i: usize) -> String {
    format!("p-{i:05}")
}

/// A score's `validUntil` for scores written now: 1,000 minutes on, past any run.
pub(crate) fn score_valid_until() -> String {
    rfc3339(jiff::Timestamp::now() + jiff::SignedDuration::from_mins(1000))
}

/// RFC 3339 at whole seconds, as the API stores times.
pub(crate) fn rfc3339(t: jiff::Timestamp) -> String {
    jiff::Timestamp::from_second(t.as_second())
        .unwrap_or(t)
        .to_string()
}

/// An API call retried while the apiserver is busy (2 cores) or the write conflicted.
pub(crate) async fn retry<T, F, Fut>(f: F) -> Result<T, kube::Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, kube::Error>>,
{
    testenv::retry::with(testenv::retry::transient_or_conflict, f).await
}
