//! Leader election against the real apiserver: two replicas on one Lease, the leader stopped
//! in each way it can stop (killed, cut off, shut down), and every replica's `is_leader()`
//! sampled all along: never two leaders at once.
#![allow(clippy::unwrap_used)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::TryStreamExt;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use kube::Api;
use kube::api::{DeleteParams, ObjectMeta, PostParams, WatchEvent, WatchParams};
use ocm_runtime::leader::{LeaderElector, LeaderTimings, Leadership};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio::time::Instant;

const LEASE: &str = "runtime-test";
/// Room for a loaded 2-core machine on top of what the timings allow; only ever waited out
/// when something is broken.
const SLACK: Duration = Duration::from_secs(20);

fn timings(lease_ms: u64, renew_ms: u64, retry_ms: u64) -> LeaderTimings {
    LeaderTimings {
        lease_duration: Duration::from_millis(lease_ms),
        renew_deadline: Duration::from_millis(renew_ms),
        retry_period: Duration::from_millis(retry_ms),
    }
}

struct Replica {
    id: &'static str,
    leadership: Leadership,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
}

impl Replica {
    fn start(client: kube::Client, ns: &str, id: &'static str, t: LeaderTimings) -> Self {
        let elector = LeaderElector::new(client, ns, LEASE, id, t).unwrap();
        let leadership = elector.leadership();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(elector.run(async move {
            let _ = stopped.await;
        }));
        Self {
            id,
            leadership,
            stop: Some(stop),
            task,
        }
    }

    fn leads(&self) -> bool {
        self.leadership.is_leader()
    }

    /// Graceful shutdown: returns once the elector has released the Lease.
    async fn shut_down(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        tokio::time::timeout(SLACK, &mut self.task)
            .await
            .expect("the elector stops after shutdown")
            .unwrap();
    }
}

/// Samples every replica's `is_leader()` about every millisecond until finished.
struct Sampler {
    stop: Arc<AtomicBool>,
    task: JoinHandle<(u64, u64)>,
}

impl Sampler {
    fn start(replicas: &[&Replica]) -> Self {
        let leaderships: Vec<Leadership> = replicas.iter().map(|r| r.leadership.clone()).collect();
        let stop = Arc::new(AtomicBool::new(false));
        let done = stop.clone();
        let task = tokio::spawn(async move {
            let (mut samples, mut several) = (0, 0);
            while !done.load(Ordering::Relaxed) {
                let leaders = leaderships.iter().filter(|l| l.is_leader()).count();
                samples += 1;
                if leaders > 1 {
                    several += 1;
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            (samples, several)
        });
        Self { stop, task }
    }

    /// Asserts that no sample saw two leaders.
    async fn finish(self) {
        self.stop.store(true, Ordering::Relaxed);
        let (samples, several) = self.task.await.unwrap();
        assert!(samples > 100, "the sampler ran ({samples} samples)");
        assert_eq!(several, 0, "{several} of {samples} samples saw two leaders");
    }
}

/// Every version of the Lease, as a watch delivers them.
struct History {
    specs: Arc<Mutex<Vec<LeaseSpec>>>,
    task: JoinHandle<()>,
}

impl History {
    async fn start(api: &Api<Lease>) -> Self {
        let wp = WatchParams::default().fields(&format!("metadata.name={LEASE}"));
        let mut events = Box::pin(api.watch(&wp, "0").await.unwrap());
        let specs = Arc::new(Mutex::new(Vec::new()));
        let sink = specs.clone();
        let task = tokio::spawn(async move {
            while let Ok(Some(event)) = events.try_next().await {
                if let WatchEvent::Added(l) | WatchEvent::Modified(l) = event {
                    sink.lock().unwrap().push(l.spec.unwrap_or_default());
                }
            }
        });
        Self { specs, task }
    }

    fn all(&self) -> Vec<LeaseSpec> {
        self.specs.lock().unwrap().clone()
    }

    fn held_by(&self, id: &str) -> usize {
        self.all().iter().filter(|s| holder(s) == id).count()
    }

    /// Waits until `id` has written the Lease `n` more times: a standby has had its chances.
    async fn renewals(&self, id: &str, n: usize) {
        let target = self.held_by(id) + n;
        eventually(&format!("{n} renewals by {id}"), SLACK, || {
            self.held_by(id) >= target
        })
        .await;
    }
}

impl Drop for History {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn holder(spec: &LeaseSpec) -> &str {
    spec.holder_identity.as_deref().unwrap_or("")
}

fn renew_time(spec: &LeaseSpec) -> jiff::Timestamp {
    spec.renew_time.as_ref().unwrap().0
}

fn acquire_time(spec: &LeaseSpec) -> jiff::Timestamp {
    spec.acquire_time.as_ref().unwrap().0
}

/// The first version held by `id`, and the version before it.
fn takeover(history: &[LeaseSpec], id: &str) -> (LeaseSpec, LeaseSpec) {
    let i = history
        .iter()
        .position(|s| holder(s) == id)
        .expect("a version held by the new leader");
    assert!(i > 0, "{id} did not create the Lease: {history:?}");
    (history[i - 1].clone(), history[i].clone())
}

async fn eventually(what: &str, within: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !done() {
        assert!(Instant::now() < deadline, "{what}: not within {within:?}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// When `leadership` stops leading, as a task.
fn lost_at(leadership: &Leadership) -> JoinHandle<Instant> {
    let mut l = leadership.clone();
    tokio::spawn(async move {
        l.lost().await;
        Instant::now()
    })
}

/// Asserts that `new` took the Lease only after the old holder's last renewal had a full lease
/// duration to expire, on the Lease's own timestamps (50 ms for the clocks' rounding).
fn waited_for_expiry(history: &[LeaseSpec], old: &str, new: &str, t: LeaderTimings) {
    let (before, first) = takeover(history, new);
    assert_eq!(holder(&before), old);
    let waited = acquire_time(&first).duration_since(renew_time(&before));
    let lease = jiff::SignedDuration::try_from(t.lease_duration).unwrap();
    assert!(
        waited >= lease - jiff::SignedDuration::from_millis(50),
        "{new} took the Lease {waited:?} after {old}'s last renewal, before it could expire ({lease:?})"
    );
    assert_eq!(
        first.lease_transitions,
        Some(before.lease_transitions.unwrap_or(0) + 1)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_one_of_two_leads_and_the_other_stays_standby() {
    let cp = testenv::shared().await;
    let admin = cp.client().unwrap();
    let ns = testenv::namespace(&admin, "leader-one").await.unwrap();
    let api: Api<Lease> = Api::namespaced(admin.clone(), &ns);
    let history = History::start(&api).await;
    let t = timings(6000, 4000, 500);
    let mut a = Replica::start(admin.clone(), &ns, "replica-a", t);
    let mut b = Replica::start(admin.clone(), &ns, "replica-b", t);
    let sampler = Sampler::start(&[&a, &b]);

    eventually("a leader", SLACK, || a.leads() || b.leads()).await;
    let (leader, standby) = if a.leads() { (&a, &b) } else { (&b, &a) };
    history.renewals(leader.id, 5).await;

    assert!(leader.leads() && !standby.leads());
    let spec = api.get(LEASE).await.unwrap().spec.unwrap();
    assert_eq!(holder(&spec), leader.id);
    assert_eq!(
        spec.lease_transitions,
        Some(0),
        "the standby never took the Lease"
    );
    assert_eq!(spec.lease_duration_seconds, Some(6));
    assert!(
        history.all().iter().all(|s| holder(s) == leader.id),
        "only the leader ever held the Lease"
    );

    a.shut_down().await;
    b.shut_down().await;
    sampler.finish().await;
    let spec = api.get(LEASE).await.unwrap().spec.unwrap();
    assert_eq!(holder(&spec), "", "released on shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_leader_is_replaced_once_its_lease_expires() {
    let cp = testenv::shared().await;
    let admin = cp.client().unwrap();
    let ns = testenv::namespace(&admin, "leader-killed").await.unwrap();
    let api: Api<Lease> = Api::namespaced(admin.clone(), &ns);
    let history = History::start(&api).await;
    let t = timings(3000, 2000, 500);
    let a = Replica::start(admin.clone(), &ns, "replica-a", t);
    eventually("replica-a leads", SLACK, || a.leads()).await;
    let mut b = Replica::start(admin.clone(), &ns, "replica-b", t);
    let sampler = Sampler::start(&[&a, &b]);
    history.renewals("replica-a", 3).await;
    assert!(!b.leads());

    // Killed: no release, no step-down; its Leadership handle must expire on its own.
    let a_lost = lost_at(&a.leadership);
    let killed = Instant::now();
    a.task.abort();
    eventually(
        "replica-b leads after replica-a is killed",
        t.lease_duration + t.retry_period.mul_f64(2.4) + SLACK,
        || b.leads(),
    )
    .await;
    let b_leads = Instant::now();
    let a_lost = a_lost.await.unwrap();
    assert!(!a.leads());
    assert!(
        a_lost <= b_leads,
        "replica-a stopped leading {:?} after the kill, replica-b led {:?} after it",
        a_lost - killed,
        b_leads - killed
    );

    b.shut_down().await;
    sampler.finish().await;
    waited_for_expiry(&history.all(), "replica-a", "replica-b", t);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_cut_off_from_the_apiserver_steps_down_before_it_is_replaced() {
    let cp = testenv::shared().await;
    let admin = cp.client().unwrap();
    let ns = testenv::namespace(&admin, "leader-cut").await.unwrap();
    // replica-a may use Leases only while its RoleBinding exists: deleting it cuts it off.
    let roles: Api<Role> = Api::namespaced(admin.clone(), &ns);
    roles
        .create(
            &PostParams::default(),
            &Role {
                metadata: ObjectMeta {
                    name: Some("leases".into()),
                    ..Default::default()
                },
                rules: Some(vec![PolicyRule {
                    api_groups: Some(vec!["coordination.k8s.io".into()]),
                    resources: Some(vec!["leases".into()]),
                    verbs: vec!["get".into(), "create".into(), "update".into()],
                    ..Default::default()
                }]),
            },
        )
        .await
        .unwrap();
    let bindings: Api<RoleBinding> = Api::namespaced(admin.clone(), &ns);
    bindings
        .create(
            &PostParams::default(),
            &RoleBinding {
                metadata: ObjectMeta {
                    name: Some("replica-a".into()),
                    ..Default::default()
                },
                role_ref: RoleRef {
                    api_group: "rbac.authorization.k8s.io".into(),
                    kind: "Role".into(),
                    name: "leases".into(),
                },
                subjects: Some(vec![Subject {
                    kind: "User".into(),
                    name: "replica-a".into(),
                    api_group: Some("rbac.authorization.k8s.io".into()),
                    ..Default::default()
                }]),
            },
        )
        .await
        .unwrap();

    let api: Api<Lease> = Api::namespaced(admin.clone(), &ns);
    let history = History::start(&api).await;
    let t = timings(3000, 2000, 500);
    let mut a = Replica::start(cp.client_as("replica-a", &[]).unwrap(), &ns, "replica-a", t);
    eventually("replica-a leads", SLACK, || a.leads()).await;
    let mut b = Replica::start(admin.clone(), &ns, "replica-b", t);
    let sampler = Sampler::start(&[&a, &b]);
    history.renewals("replica-a", 3).await;

    let a_lost = lost_at(&a.leadership);
    let cut = Instant::now();
    bindings
        .delete("replica-a", &DeleteParams::default())
        .await
        .unwrap();
    eventually(
        "replica-b leads after replica-a is cut off",
        t.lease_duration + t.retry_period.mul_f64(2.4) + SLACK,
        || b.leads(),
    )
    .await;
    let b_leads = Instant::now();
    let a_lost = a_lost.await.unwrap();
    assert!(
        a_lost <= b_leads,
        "replica-a stopped leading {:?} after the cut, replica-b led {:?} after it",
        a_lost - cut,
        b_leads - cut
    );
    assert!(!a.leads());
    assert!(!a.task.is_finished(), "replica-a keeps campaigning");

    a.shut_down().await;
    b.shut_down().await;
    sampler.finish().await;
    waited_for_expiry(&history.all(), "replica-a", "replica-b", t);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_shutting_down_hands_over_at_once() {
    let cp = testenv::shared().await;
    let admin = cp.client().unwrap();
    let ns = testenv::namespace(&admin, "leader-release").await.unwrap();
    let api: Api<Lease> = Api::namespaced(admin.clone(), &ns);
    let history = History::start(&api).await;
    // A long lease: waiting for it to expire would show.
    let t = timings(10_000, 6000, 500);
    let mut a = Replica::start(admin.clone(), &ns, "replica-a", t);
    eventually("replica-a leads", SLACK, || a.leads()).await;
    let mut b = Replica::start(admin.clone(), &ns, "replica-b", t);
    let sampler = Sampler::start(&[&a, &b]);
    history.renewals("replica-a", 3).await;

    a.shut_down().await;
    assert!(!a.leads(), "replica-a stops leading before it releases");
    // Only a liveness deadline here: that replica-b did not wait for the lease to expire is
    // read below from the Lease's own timestamps, not from how fast this machine is.
    eventually(
        "replica-b leads after replica-a released the Lease",
        SLACK,
        || b.leads(),
    )
    .await;

    b.shut_down().await;
    sampler.finish().await;
    let history = history.all();
    let (released, first) = takeover(&history, "replica-b");
    assert_eq!(holder(&released), "", "replica-a released the Lease");
    assert_eq!(released.lease_transitions, Some(0));
    assert_eq!(first.lease_transitions, Some(1));
    let waited = acquire_time(&first).duration_since(renew_time(&released));
    assert!(
        waited < jiff::SignedDuration::try_from(t.lease_duration).unwrap(),
        "replica-b took the released Lease after {waited:?}, not after the lease duration"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_election_means_always_leading() {
    let cp = testenv::shared().await;
    let args = ocm_runtime::LeaderArgs {
        leader_elect: false,
        leader_election_namespace: "unused".into(),
        leader_election_lease_duration: Duration::from_secs(15),
        leader_election_renew_deadline: Duration::from_secs(10),
        leader_election_retry_period: Duration::from_secs(2),
    };
    assert!(args.elector(cp.client().unwrap(), LEASE).unwrap().is_none());
    let bad = ocm_runtime::LeaderArgs {
        leader_elect: true,
        leader_election_renew_deadline: Duration::from_secs(20),
        ..args
    };
    let e = bad.elector(cp.client().unwrap(), LEASE).err().unwrap();
    assert!(
        e.to_string()
            .contains("must be longer than the renew deadline"),
        "{e}"
    );
    assert!(Leadership::always().is_leader());
}

/// A write planned while leading, then held in the client's rate limiter until the leadership
/// has ended (a busy or frozen leader), is refused as it goes out; reads still go out; writes
/// go out again only while leading.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_waiting_in_the_rate_limiter_is_refused_once_leadership_ended() {
    use k8s_openapi::api::core::v1::ConfigMap;
    use ocm_runtime::client::{RateLimiter, leader_client};
    use ocm_runtime::leader::is_not_leader;

    let cp = testenv::shared().await;
    let admin = cp.client().unwrap();
    let ns = testenv::namespace(&admin, "leader-gate").await.unwrap();
    let t = timings(3000, 2000, 500);
    let a = Replica::start(admin.clone(), &ns, "replica-a", t);
    eventually("replica-a leads", SLACK, || a.leads()).await;
    // One request every 5 s: the second waits longer than the renew deadline.
    let limiter = RateLimiter::new(0.2, 1).unwrap();
    let gated = leader_client(
        cp.config(None).unwrap(),
        Some(&limiter),
        "gate-test",
        &a.leadership,
    )
    .unwrap();
    let maps: Api<ConfigMap> = Api::namespaced(gated.clone(), &ns);
    let map = |name: &str| ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        ..Default::default()
    };
    maps.create(&PostParams::default(), &map("while-leading"))
        .await
        .unwrap();

    let queued = tokio::spawn({
        let maps = maps.clone();
        let m = map("queued");
        async move {
            let r = maps.create(&PostParams::default(), &m).await;
            (r, Instant::now())
        }
    });
    // The elector dies while the write waits: leadership ends at the renew deadline.
    let lost = lost_at(&a.leadership);
    a.task.abort();
    let (result, done) = queued.await.unwrap();
    let lost = lost.await.unwrap();
    assert!(
        lost <= done,
        "the write was done before leadership ended: the test proves nothing"
    );
    let err = result.expect_err("a write sent after leadership ended");
    assert!(is_not_leader(&err), "{err}");
    let check: Api<ConfigMap> = Api::namespaced(admin.clone(), &ns);
    assert!(check.get_opt("queued").await.unwrap().is_none());
    assert!(check.get_opt("while-leading").await.unwrap().is_some());

    // Reads are not gated; a write is refused before the rate limiter even matters.
    let unthrottled =
        leader_client(cp.config(None).unwrap(), None, "gate-test", &a.leadership).unwrap();
    let maps: Api<ConfigMap> = Api::namespaced(unthrottled, &ns);
    assert!(maps.get_opt("while-leading").await.unwrap().is_some());
    let err = maps
        .delete("while-leading", &DeleteParams::default())
        .await
        .expect_err("a delete while not leading");
    assert!(is_not_leader(&err), "{err}");
    assert!(check.get_opt("while-leading").await.unwrap().is_some());
}
