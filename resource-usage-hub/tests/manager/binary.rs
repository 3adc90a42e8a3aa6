//! The binary: least privilege, leadership hand-over, and a deposed leader.

use super::*;

#[tokio::test]
async fn the_binary_runs_with_least_privilege_and_hands_over_leadership() {
    let cp = testenv::shared().await;
    let admin = cp.client().expect("client");
    let addon = "binary-addon";
    let system = namespace(&admin, "manager-system").await;
    let (dir, kubeconfig) = as_the_manager(cp, &admin, addon, &system).await;

    // What an earlier version left: the agent's Role and a RoleBinding to it, owned by the MCA.
    let c0 = cluster(&admin, "binary-cluster").await;
    create_mca(&admin, &c0, addon).await;
    let permission = format!("open-cluster-management:{addon}:agent");
    let m0 = mca(&admin, &c0, addon).await.expect("mca");
    let owned = json!({"labels": {"open-cluster-management.io/addon-name": addon},
        "ownerReferences": [{"apiVersion": "addon.open-cluster-management.io/v1alpha1",
            "kind": "ManagedClusterAddOn", "name": addon, "uid": m0.uid(), "controller": true}]});
    let mut legacy_role = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": permission, "namespace": c0},
        "rules": [{"apiGroups": ["cluster.open-cluster-management.io"], "resources": ["addonplacementscores"], "verbs": ["get", "create"]}]});
    let mut legacy_binding = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": permission, "namespace": c0},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": permission},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": default_user(&c0, addon, &format!("{addon}-agent"))}]});
    for o in [&mut legacy_role, &mut legacy_binding] {
        o["metadata"]["labels"] = owned["labels"].clone();
        o["metadata"]["ownerReferences"] = owned["ownerReferences"].clone();
        testenv::apply(&admin, o, &c0)
            .await
            .expect("a legacy object");
    }

    let spawn = |port: u16| {
        Command::new(env!("CARGO_BIN_EXE_resource-usage-hub"))
            .args([
                "manager",
                "--addon-name",
                addon,
                "--agent-image",
                IMAGE,
                "--leader-elect=true",
                "--leader-election-namespace",
                &system,
                "--leader-election-lease-duration=2s",
                "--leader-election-renew-deadline=1500ms",
                "--leader-election-retry-period=300ms",
                "--event-debounce=50ms",
            ])
            .arg(format!("--metrics-bind-address=127.0.0.1:{port}"))
            .env("KUBECONFIG", &kubeconfig)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map(Process)
            .expect("manager binary")
    };
    let ports = [testenv::free_port(), testenv::free_port()];
    let mut procs = vec![Some(spawn(ports[0])), Some(spawn(ports[1]))];

    // The leader creates the ClusterManagementAddOn and installs where it is asked to.
    let cmas = Api::<ClusterManagementAddOn>::all(admin.clone());
    let cma = eventually(
        "the manager creates its ClusterManagementAddOn",
        DEADLINE,
        || async { cmas.get_opt(addon).await.ok().flatten() },
    )
    .await;
    assert_eq!(
        cma.annotations()
            .get("addon.open-cluster-management.io/lifecycle")
            .map(String::as_str),
        Some("self")
    );
    let c1 = cluster(&admin, "binary-cluster").await;
    create_mca(&admin, &c1, addon).await;
    eventually(
        "the work, written with the manager's own permission",
        DEADLINE,
        || work(&admin, &c1, addon),
    )
    .await;
    eventually(
        "the agent's hub permission, granted with the manager's own",
        DEADLINE,
        || async {
            mca(&admin, &c1, addon)
                .await
                .filter(|m| condition(m, "RegistrationApplied").map(|c| c.0) == Some("True"))
        },
    )
    .await;
    // The earlier version's Role is gone and the binding names the ClusterRole now.
    eventually("the legacy permission is migrated", DEADLINE, || async {
        let role = Api::<Role>::namespaced(admin.clone(), &c0)
            .get_opt(&permission)
            .await
            .ok()?;
        let b = Api::<RoleBinding>::namespaced(admin.clone(), &c0)
            .get_opt(&permission)
            .await
            .ok()??;
        (role.is_none() && b.role_ref.kind == "ClusterRole").then_some(())
    })
    .await;
    common::allow_csr_create(
        &admin,
        &format!("csr-create-{c1}"),
        "Group",
        &registration_agent(&c1).1[0],
    )
    .await;
    let agent_user = default_user(&c1, addon, &format!("{addon}-agent"));
    let ag = default_groups(&c1, addon);
    request_csr(
        cp,
        &c1,
        &format!("{c1}-agent"),
        (&c1, addon),
        &agent_user,
        &[&ag[0], &ag[1]],
    )
    .await;
    eventually(
        "the CSR, approved with the manager's own permission",
        DEADLINE,
        || async {
            Api::<CertificateSigningRequest>::all(admin.clone())
                .get(&format!("{c1}-agent"))
                .await
                .ok()
                .filter(approved)
        },
    )
    .await;
    for port in ports {
        eventually("healthz, readyz", DEADLINE, || async {
            let h = get(port, "/healthz").await?;
            let r = get(port, "/readyz").await?;
            (h.0 == 200 && r.0 == 200).then_some(())
        })
        .await;
    }
    // Exactly one of them works; the other stands by.
    let counts = eventually("one leader", DEADLINE, || async {
        let a = passes(&get(ports[0], "/metrics").await?.1);
        let b = passes(&get(ports[1], "/metrics").await?.1);
        ((a > 0) != (b > 0)).then_some((a, b))
    })
    .await;
    let leader = usize::from(counts.1 > 0);
    let standby = 1 - leader;
    procs[leader] = None;
    let c2 = cluster(&admin, "binary-cluster").await;
    create_mca(&admin, &c2, addon).await;
    eventually("the standby takes over", DEADLINE, || {
        work(&admin, &c2, addon)
    })
    .await;
    // (A pass counts once its writes are done.)
    eventually("the new leader counts its pass", DEADLINE, || async {
        (passes(&get(ports[standby], "/metrics").await?.1) > 0).then_some(())
    })
    .await;
    drop(procs);

    // What the manager's identity may not do.
    let as_manager = cp
        .client_as_service_account(&system, MANAGER_ACCOUNT)
        .expect("manager client");
    let forbidden =
        |r: Result<(), kube::Error>| matches!(r, Err(kube::Error::Api(s)) if s.code == 403);
    assert!(
        forbidden(
            Api::<k8s_openapi::api::core::v1::Secret>::all(as_manager.clone())
                .list(&Default::default())
                .await
                .map(drop)
        ),
        "secrets"
    );
    assert!(
        forbidden(
            Api::<ClusterManagementAddOn>::all(as_manager.clone())
                .delete(addon, &Default::default())
                .await
                .map(drop)
        ),
        "deleting the ClusterManagementAddOn"
    );
    // Writes to existing objects only under the add-on's own names.
    let other_role = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "not-the-agents", "namespace": c1}, "rules": []});
    assert!(
        forbidden(
            Api::<Role>::namespaced(as_manager.clone(), &c1)
                .patch(
                    "not-the-agents",
                    &PatchParams::apply("resource-usage-hub").force(),
                    &Patch::Apply(&other_role)
                )
                .await
                .map(drop)
        ),
        "another Role"
    );
    assert!(
        forbidden(
            Api::<ManifestWork>::namespaced(as_manager.clone(), &c1)
                .delete("someone-elses-work", &Default::default())
                .await
                .map(drop)
        ),
        "another work"
    );
    refuses_what_the_manager_must_not_grant(&as_manager, addon, &c1, &system).await;
    assert!(
        forbidden(
            Api::<AddOnPlacementScore>::namespaced(as_manager.clone(), &c1)
                .list(&Default::default())
                .await
                .map(drop)
        ),
        "listing scores"
    );
    assert!(
        forbidden(
            Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(as_manager, &c1)
                .list(&Default::default())
                .await
                .map(drop)
        ),
        "leases outside its namespace"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// As the manager's identity: no role but the agent's can be bound, to no one but a cluster's
/// own agent; no Role, no ManifestWork of another name, can be made.
async fn refuses_what_the_manager_must_not_grant(
    as_manager: &Client,
    addon: &str,
    cluster: &str,
    own_ns: &str,
) {
    let create = |kind: &'static str, ns: Option<String>, obj: Value| {
        let client = as_manager.clone();
        async move {
            let (group, version) = match kind {
                "ManifestWork" => ("work.open-cluster-management.io", "v1"),
                _ => ("rbac.authorization.k8s.io", "v1"),
            };
            let gvk = kube::core::GroupVersionKind::gvk(group, version, kind);
            let (ar, _) = kube::discovery::pinned_kind(&client, &gvk).await?;
            let api: Api<kube::api::DynamicObject> = match &ns {
                Some(ns) => Api::namespaced_with(client, ns, &ar),
                None => Api::all_with(client, &ar),
            };
            let o: kube::api::DynamicObject =
                serde_json::from_value(obj).map_err(kube::Error::SerdeError)?;
            api.create(&PostParams::default(), &o)
                .await
                .map(|o| serde_json::to_value(o).unwrap_or_default())
        }
    };
    let agent_role = format!("open-cluster-management:{addon}:agent-hub");
    let agent_binding = format!("open-cluster-management:{addon}:agent");
    let binding = |ns: &str, name: &str, role: (&str, &str), subject: Value| {
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": name, "namespace": ns},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role.0, "name": role.1},
            "subjects": [subject]})
    };
    let user =
        |n: &str| json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": n});
    let everyone = json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:authenticated"});
    let agent = default_user(cluster, addon, &format!("{addon}-agent"));
    let cases: Vec<(&str, &'static str, Option<String>, Value)> = vec![
        (
            "a ClusterRoleBinding to cluster-admin",
            "ClusterRoleBinding",
            None,
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                "metadata": {"name": format!("{addon}-escalate")},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
                "subjects": [user("mallory")]}),
        ),
        (
            "cluster-admin in a cluster namespace, under the agent's binding name",
            "RoleBinding",
            Some(cluster.to_owned()),
            binding(
                cluster,
                &agent_binding,
                ("ClusterRole", "cluster-admin"),
                user(&agent),
            ),
        ),
        (
            "cluster-admin in its own namespace",
            "RoleBinding",
            Some(own_ns.to_owned()),
            binding(
                own_ns,
                "escalate",
                ("ClusterRole", "cluster-admin"),
                user("mallory"),
            ),
        ),
        (
            "admin in a cluster namespace",
            "RoleBinding",
            Some(cluster.to_owned()),
            binding(
                cluster,
                "escalate-admin",
                ("ClusterRole", "admin"),
                user(&agent),
            ),
        ),
        (
            "admin in its own namespace",
            "RoleBinding",
            Some(own_ns.to_owned()),
            binding(
                own_ns,
                "escalate-admin",
                ("ClusterRole", "admin"),
                user("mallory"),
            ),
        ),
        (
            "the agent's role to everyone",
            "RoleBinding",
            Some(cluster.to_owned()),
            binding(
                cluster,
                "scores-for-all",
                ("ClusterRole", &agent_role),
                everyone.clone(),
            ),
        ),
        (
            "the agent's role to everyone, under the agent's binding name elsewhere",
            "RoleBinding",
            Some(own_ns.to_owned()),
            binding(
                own_ns,
                &agent_binding,
                ("ClusterRole", &agent_role),
                everyone.clone(),
            ),
        ),
        (
            "the agent's role to another cluster's agent",
            "RoleBinding",
            Some(own_ns.to_owned()),
            binding(
                own_ns,
                &agent_binding,
                ("ClusterRole", &agent_role),
                user(&agent),
            ),
        ),
        (
            "a Role with the agent's permissions",
            "Role",
            Some(cluster.to_owned()),
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                "metadata": {"name": "scores", "namespace": cluster},
                "rules": [{"apiGroups": ["cluster.open-cluster-management.io"], "resources": ["addonplacementscores"], "verbs": ["get", "create"]}]}),
        ),
        (
            "a ManifestWork of another name",
            "ManifestWork",
            Some(cluster.to_owned()),
            json!({"apiVersion": "work.open-cluster-management.io/v1", "kind": "ManifestWork",
                "metadata": {"name": "not-the-addons", "namespace": cluster},
                "spec": {"workload": {"manifests": [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "pwned"}}]}}}),
        ),
    ];
    let mut allowed = Vec::new();
    for (what, kind, ns, obj) in cases {
        let r = create(kind, ns, obj).await;
        if !matches!(&r, Err(kube::Error::Api(s)) if s.code == 403) {
            allowed.push(format!("{what}: {r:?}"));
        }
    }
    assert!(
        allowed.is_empty(),
        "the manager's identity could: {allowed:#?}"
    );
}

/// The deposed-leader attack on the manager, with real processes as the chart's manager
/// identity: the leader is frozen (SIGSTOP) in the middle of installing on four clusters, with
/// writes waiting in its client's rate limiter; the standby takes the Lease, finishes, and then
/// removes everything when the add-on is deleted from those clusters; the old leader runs again
/// (SIGCONT). For 30 s nothing of the add-on comes back on those clusters, and the old leader
/// exits.
#[tokio::test]
async fn a_deposed_manager_writes_nothing_and_exits() {
    use k8s_openapi::api::coordination::v1::Lease;

    let cp = testenv::shared().await;
    let admin = cp.client().expect("client");
    let addon = "deposed-addon";
    let system = namespace(&admin, "manager-deposed").await;
    let (dir, kubeconfig) = as_the_manager(cp, &admin, addon, &system).await;
    let spawn = |name: &str, extra: &[&str]| {
        let log = std::fs::File::create(dir.join(format!("{name}.log"))).expect("log");
        Command::new(env!("CARGO_BIN_EXE_resource-usage-hub"))
            .args(["manager", "--addon-name", addon, "--agent-image", IMAGE])
            .args(["--leader-election-namespace", &system])
            .args([
                "--leader-election-lease-duration=4s",
                "--leader-election-renew-deadline=3s",
                "--leader-election-retry-period=500ms",
                "--event-debounce=50ms",
            ])
            .arg(format!(
                "--metrics-bind-address=127.0.0.1:{}",
                testenv::free_port()
            ))
            .args(extra)
            .env("KUBECONFIG", &kubeconfig)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map(Process)
            .expect("manager binary")
    };
    let signal = |p: &Process, signal: &str| {
        let status = Command::new("kill")
            .args([&format!("-{signal}"), &p.0.id().to_string()])
            .status()
            .expect("kill");
        assert!(status.success(), "kill -{signal}");
    };
    let leases: Api<Lease> = Api::namespaced(admin.clone(), &system);
    let holder = || async {
        let lease = leases.get_opt(&format!("{addon}-manager")).await.ok()??;
        lease.spec?.holder_identity.filter(|h| !h.is_empty())
    };

    // The old leader: a slow client (2 requests/s), so that a pass keeps writes waiting.
    let mut old = spawn("old-leader", &["--client-qps=2", "--client-burst=1"]);
    let old_id = eventually("the first manager to lead", DEADLINE, holder).await;
    let _new = spawn("new-leader", &[]);
    let mut clusters = Vec::new();
    for _ in 0..4 {
        let c = cluster(&admin, "deposed-cluster").await;
        create_mca(&admin, &c, addon).await;
        clusters.push(c);
    }
    // What the add-on has on a cluster: its RoleBinding and ManifestWork (2 when installed); a
    // Role would be a write the manager may no longer make, so it is counted too.
    let installed = |c: String| {
        let admin = admin.clone();
        async move {
            let role = Api::<Role>::namespaced(admin.clone(), &c)
                .list(&Default::default())
                .await
                .expect("roles");
            let binding = Api::<RoleBinding>::namespaced(admin.clone(), &c)
                .list(&Default::default())
                .await
                .expect("bindings");
            let works = Api::<ManifestWork>::namespaced(admin.clone(), &c)
                .list(&Default::default())
                .await
                .expect("works");
            role.items.len() + binding.items.len() + works.items.len()
        }
    };
    eventually("the old leader's first writes", DEADLINE, || async {
        for c in &clusters {
            if installed(c.clone()).await > 0 {
                return Some(());
            }
        }
        None
    })
    .await;
    signal(&old, "STOP");
    let mut done = 0;
    for c in &clusters {
        done += usize::from(installed(c.clone()).await == 2);
    }
    assert!(
        done < clusters.len(),
        "the old leader finished before it was stopped"
    );

    // The standby takes over, finishes, then removes the add-on from every cluster.
    eventually("the standby to take the Lease", DEADLINE, || async {
        holder().await.filter(|h| *h != old_id)
    })
    .await;
    for c in &clusters {
        eventually("the new leader's install", DEADLINE, || async {
            (installed(c.clone()).await == 2).then_some(())
        })
        .await;
    }
    for c in &clusters {
        Api::<ManagedClusterAddOn>::namespaced(admin.clone(), c)
            .delete(addon, &Default::default())
            .await
            .expect("delete mca");
    }
    for c in &clusters {
        eventually("the new leader's removal", DEADLINE, || async {
            (installed(c.clone()).await == 0 && mca(&admin, c, addon).await.is_none()).then_some(())
        })
        .await;
    }

    // The old leader runs again, its lease long gone and writes pending.
    signal(&old, "CONT");
    // Until it exits (a process that has exited writes nothing more), nothing it writes may
    // show: checked at every poll, and once more after it exited.
    let mut exited = None;
    eventually("the old leader to exit", Duration::from_secs(30), || {
        let done = exited.is_some();
        if exited.is_none() {
            exited = old.0.try_wait().expect("try_wait");
        }
        let (clusters, admin, installed, holder, old_id) =
            (&clusters, &admin, &installed, &holder, &old_id);
        async move {
            for c in clusters {
                assert_eq!(
                    installed(c.clone()).await,
                    0,
                    "the old leader wrote on {c} after it resumed"
                );
                assert!(mca(admin, c, addon).await.is_none());
            }
            assert_ne!(holder().await.as_deref(), Some(old_id.as_str()));
            done.then_some(())
        }
    })
    .await;
    let log = std::fs::read_to_string(dir.join("old-leader.log")).expect("log");
    let status = exited.unwrap_or_else(|| panic!("the old leader is still running:\n{log}"));
    assert!(!status.success(), "the old leader exited with {status:?}");
    assert!(log.contains("lost the leader lease"), "{log}");
    let _ = std::fs::remove_dir_all(&dir);
}
