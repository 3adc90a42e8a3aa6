//! Names that could collide: clusters named like our own objects and
//! namespaces, and Placements named like another Placement's PlacementDecisions, on the local
//! fleet (the hub's apiserver also plays every managed cluster, as on a hub that manages
//! itself). Every cluster gets its add-on, its hub RoleBinding and its score; the Placements'
//! decisions stay apart; the Leases stay with the scheduler and the manager; and the agent's
//! own manifests, applied on a cluster whose namespace is also the agent's install namespace,
//! do not overwrite the hub RoleBinding the manager made there. A Placement whose name is too
//! long for the label its PlacementDecisions carry says so in its status.

use std::time::Duration;

use e2e::fleet::{Fleet, LEASE_NAMESPACE, Options, PLACEMENTS, binaries};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::rbac::v1::RoleBinding;
use kube::Api;
use kube::api::ListParams;
use ocm_api::{ManagedClusterAddOn, ManifestWork, Placement, PlacementDecision};
use serde_json::json;
use testenv::eventually;

const DEADLINE: Duration = Duration::from_secs(90);
const ADDON: &str = ocm_api::wellknown::score::RESOURCE_USAGE_ADDON;
/// The agent's default install namespace on a managed cluster.
const INSTALL_NAMESPACE: &str = "open-cluster-management-agent-addon";
/// The manager's hub RoleBinding in each cluster namespace.
const HUB_BINDING: &str = "open-cluster-management:resource-usage-collect:agent";

#[tokio::test]
async fn clusters_and_placements_named_like_our_objects_do_not_collide() {
    let logs = std::env::temp_dir().join(format!("names-test-logs-{}", std::process::id()));
    // Our Leases' namespace, the agent's install namespace, the add-on's name, the
    // Placements' namespace, a name like a store of ours.
    let risky = [
        LEASE_NAMESPACE,
        INSTALL_NAMESPACE,
        ADDON,
        "managed-clusters",
    ];
    let opts = Options {
        clusters: risky.iter().map(|c| ((*c).to_owned(), 8)).collect(),
        refresh: Duration::from_secs(5),
        debounce: Duration::from_millis(500),
        bin_dir: binaries(true).expect("the fleet's binaries"),
        log_dir: logs.clone(),
        leader_elect: true,
    };
    let mut fleet = Fleet::start(&opts).await.expect("the fleet");
    let client = fleet.client.clone();
    fleet
        .install_addon("all")
        .await
        .expect("the ClusterManagementAddOn");
    // `all` makes `all-decision-1`; a Placement with that very name makes its own.
    fleet
        .placement("all", json!({"clusterSets": ["fleet"]}))
        .await
        .expect("placement");
    fleet
        .placement(
            "all-decision-1",
            json!({"numberOfClusters": 1, "clusterSets": ["fleet"]}),
        )
        .await
        .expect("placement");

    // A name too long for the label its PlacementDecisions would carry (63 characters).
    let long = format!("long-{}", "x".repeat(59));
    fleet
        .placement(&long, json!({"clusterSets": ["fleet"]}))
        .await
        .expect("placement");

    let mut every: Vec<String> = risky.iter().map(|c| (*c).to_owned()).collect();
    every.sort();
    eventually("all selects every cluster", DEADLINE, || async {
        (fleet.decisions("all").await.ok()? == every).then_some(())
    })
    .await;
    eventually("all-decision-1 selects one", DEADLINE, || async {
        (fleet.decisions("all-decision-1").await.ok()?.len() == 1).then_some(())
    })
    .await;
    // Each PlacementDecision is labelled for the Placement whose name it starts with.
    let decisions = Api::<PlacementDecision>::namespaced(client.clone(), PLACEMENTS)
        .list(&ListParams::default())
        .await
        .expect("decisions");
    let mut owners: Vec<(String, String)> = decisions
        .items
        .iter()
        .map(|d| {
            (
                d.metadata.name.clone().unwrap_or_default(),
                d.metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get("cluster.open-cluster-management.io/placement"))
                    .cloned()
                    .unwrap_or_default(),
            )
        })
        .collect();
    owners.sort();
    assert_eq!(
        owners,
        [
            ("all-decision-1".to_owned(), "all".to_owned()),
            (
                "all-decision-1-decision-1".to_owned(),
                "all-decision-1".to_owned()
            ),
        ]
    );

    // The long-named Placement says why it has no decisions.
    let message = eventually("the long name reported", DEADLINE, || async {
        let p = Api::<Placement>::namespaced(client.clone(), PLACEMENTS)
            .get(&long)
            .await
            .ok()?;
        p.status?
            .conditions
            .into_iter()
            .find(|c| c.type_ == "PlacementSatisfied" && c.status == "False")
            .map(|c| c.message)
            .filter(|m| m.contains("at most 63"))
    })
    .await;
    eprintln!("{long}: {message}");

    // Every cluster: its add-on, its work, its hub RoleBinding, its agent's score.
    for c in risky {
        eventually(&format!("{c}: add-on, work, binding"), DEADLINE, || async {
            Api::<ManagedClusterAddOn>::namespaced(client.clone(), c)
                .get_opt(ADDON)
                .await
                .ok()??;
            Api::<ManifestWork>::namespaced(client.clone(), c)
                .get_opt(&format!("addon-{ADDON}-deploy-0"))
                .await
                .ok()??;
            Api::<RoleBinding>::namespaced(client.clone(), c)
                .get_opt(HUB_BINDING)
                .await
                .ok()?
        })
        .await;
        eventually(&format!("{c}'s score"), DEADLINE, || fleet.cpu_score(c)).await;
    }
    // The Leases in a namespace that is also a cluster's stay with their holders.
    for lease in ["placement-scheduler", "resource-usage-collect-manager"] {
        let l = Api::<Lease>::namespaced(client.clone(), LEASE_NAMESPACE)
            .get(lease)
            .await
            .expect("lease");
        assert!(
            l.spec
                .and_then(|s| s.holder_identity)
                .is_some_and(|h| !h.is_empty()),
            "{lease} held"
        );
    }

    // On a hub that manages itself, the work agent applies the agent's manifests in its
    // install namespace; for the cluster named like that namespace it is also the cluster
    // namespace, where the manager keeps the agent's hub RoleBinding. Play the work agent.
    let work = Api::<ManifestWork>::namespaced(client.clone(), INSTALL_NAMESPACE)
        .get(&format!("addon-{ADDON}-deploy-0"))
        .await
        .expect("the work");
    let hub_binding_before = Api::<RoleBinding>::namespaced(client.clone(), INSTALL_NAMESPACE)
        .get(HUB_BINDING)
        .await
        .expect("the hub binding");
    for m in &work.spec.workload.manifests {
        let obj = serde_json::to_value(m).expect("manifest");
        if let Err(e) = testenv::apply(&client, &obj, INSTALL_NAMESPACE).await {
            panic!(
                "the agent's manifest {} {} cannot be applied next to the hub's objects: {e}",
                obj["kind"], obj["metadata"]["name"]
            );
        }
    }
    let hub_binding = Api::<RoleBinding>::namespaced(client.clone(), INSTALL_NAMESPACE)
        .get(HUB_BINDING)
        .await
        .expect("the hub binding");
    assert_eq!(hub_binding.role_ref, hub_binding_before.role_ref);
    assert_eq!(hub_binding.subjects, hub_binding_before.subjects);
    fleet.check().expect("all running");
    drop(fleet);
    let _ = std::fs::remove_dir_all(&logs);
}
