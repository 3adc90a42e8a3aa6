//! Churn: bound pods created and deleted at a steady rate during the steady window.

use super::*;

pub(crate) struct Churn {
    pub(crate) stop: Arc<AtomicBool>,
    pub(crate) task: tokio::task::JoinHandle<Churned>,
}

#[derive(Default)]
pub(crate) struct Churned {
    pub(crate) created: u64,
    pub(crate) deleted: u64,
    pub(crate) failed: u64,
    /// Deleted after the window.
    pub(crate) cleaned: u64,
    /// The churn pods that exist: name → (node, profile).
    pub(crate) live: BTreeMap<String, (usize, usize)>,
}

/// Deletes a bound pod at once (no kubelet here to finish a graceful deletion).
pub(crate) async fn delete_pod(api: &Api<Pod>, name: &str) -> bool {
    let dp = DeleteParams {
        grace_period_seconds: Some(0),
        ..DeleteParams::default()
    };
    retry(|| api.delete(name, &dp)).await.is_ok()
}

impl Churn {
    /// About `rate` creates and (once 100 churn pods exist) as many deletes a second.
    pub(crate) fn start(client: Client, rate: f64, nodes: usize) -> Churn {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let task = tokio::spawn(async move {
            let state = Arc::new(Mutex::new(Churned::default()));
            let api = Api::<Pod>::namespaced(client.clone(), CHURN_NS);
            let permits = Arc::new(tokio::sync::Semaphore::new(16));
            let mut queue = VecDeque::new();
            let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / rate.max(0.1)));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut seq = 0usize;
            while !flag.load(Ordering::Relaxed) {
                tick.tick().await;
                let Ok(permit) = permits.clone().acquire_owned().await else {
                    break;
                };
                seq += 1;
                let (name, node, profile) = (
                    format!("churn-{seq:06}"),
                    (seq * 7919) % nodes,
                    profile_of(seq),
                );
                let victim = (queue.len() >= 100).then(|| queue.pop_front()).flatten();
                queue.push_back(name.clone());
                let (api, client, state) = (api.clone(), client.clone(), state.clone());
                tokio::spawn(async move {
                    let body = pod_body(&name, CHURN_NS, &node_name(node), profile);
                    let created = create_pod(&client, CHURN_NS, body).await.is_ok();
                    let deleted = match victim {
                        Some(v) => Some((delete_pod(&api, &v).await, v)),
                        None => None,
                    };
                    let mut s = state.lock();
                    if created {
                        s.created += 1;
                        s.live.insert(name, (node, profile));
                    } else {
                        s.failed += 1;
                    }
                    if let Some((ok, v)) = deleted {
                        if ok {
                            s.deleted += 1;
                            s.live.remove(&v);
                        } else {
                            s.failed += 1;
                        }
                    }
                    drop(permit);
                });
            }
            // Wait for the requests in flight, then delete what is left: back to the fleet the
            // first scores were checked against.
            let _ = permits.acquire_many(16).await;
            let mut s = std::mem::take(&mut *state.lock());
            let left: Vec<String> = s.live.keys().cloned().collect();
            let mut gone = futures::stream::iter(left)
                .map(|name| async { (delete_pod(&api, &name).await, name) })
                .buffer_unordered(16);
            while let Some((ok, name)) = gone.next().await {
                if ok {
                    s.live.remove(&name);
                    s.cleaned += 1;
                }
            }
            drop(gone);
            s
        });
        Churn { stop, task }
    }

    pub(crate) async fn stop(self) -> Churned {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.unwrap_or_default()
    }
}

// ---------------------------------------------------------------------------------------------
