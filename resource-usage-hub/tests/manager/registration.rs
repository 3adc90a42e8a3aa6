//! CSR approval and the agent's hub permission for the subject the spoke reports.

use super::*;

#[tokio::test]
async fn approves_only_the_agents_exact_csr_and_the_identity_writes_only_its_scores() {
    let cp = testenv::shared().await;
    let client = cp.client().expect("client");
    let addon = "csr-addon";
    apply_agent_role(&client, addon).await;
    let c1 = cluster(&client, "csr-cluster").await;
    let c2 = cluster(&client, "csr-cluster").await;
    create_cma(&client, addon, json!({"type": "Manual"})).await;
    create_mca(&client, &c1, addon).await;
    create_mca(&client, &c2, addon).await;
    for c in [&c1, &c2] {
        let group = registration_agent(c).1[0].clone();
        common::allow_csr_create(&client, &format!("csr-create-{c}"), "Group", &group).await;
    }
    let _m = start(cp, settings(addon));
    let agent = format!("{addon}-agent");
    let user = default_user(&c1, addon, &agent);
    let g = default_groups(&c1, addon);

    // The wrong ones first, so that the pass that approves the right one has seen them all.
    let bad: Vec<CsrCase<'_>> = vec![
        (
            format!("{c1}-extra-group"),
            c1.as_str(),
            user.clone(),
            vec![&g[0], &g[1], "cluster-admins"],
            (&c1, addon),
        ),
        (
            format!("{c1}-wrong-cn"),
            c1.as_str(),
            default_user(&c2, addon, &agent),
            vec![&g[0], &g[1]],
            (&c1, addon),
        ),
        (
            format!("{c1}-other-addon"),
            c1.as_str(),
            user.clone(),
            vec![&g[0], &g[1]],
            (&c1, "other-addon"),
        ),
        // Cluster 2's registration agent asking for cluster 1's add-on identity.
        (
            format!("{c1}-from-c2"),
            c2.as_str(),
            user.clone(),
            vec![&g[0], &g[1]],
            (&c1, addon),
        ),
    ];
    for (name, as_cluster, cn, orgs, labels) in &bad {
        request_csr(cp, as_cluster, name, *labels, cn, orgs).await;
    }
    let good = format!("{c1}-good");
    request_csr(cp, &c1, &good, (&c1, addon), &user, &[&g[0], &g[1]]).await;
    let csrs = Api::<CertificateSigningRequest>::all(client.clone());
    eventually("the agent's CSR is approved", DEADLINE, || async {
        csrs.get(&good).await.ok().filter(approved)
    })
    .await;
    for (name, ..) in &bad {
        let csr = csrs.get(name).await.expect("csr");
        assert!(!approved(&csr), "{name} must not be approved");
    }

    // The registration identity: its cluster's scores, nothing else.
    eventually("the hub permission", DEADLINE, || async {
        mca(&client, &c1, addon)
            .await
            .filter(|m| condition(m, "RegistrationApplied").map(|c| c.0) == Some("True"))
    })
    .await;
    let gs: Vec<&str> = g.iter().map(String::as_str).collect();
    let agent_client = cp.client_as(&user, &gs).expect("agent client");
    let score = |ns: &str| -> AddOnPlacementScore {
        serde_json::from_value(json!({
            "apiVersion": "cluster.open-cluster-management.io/v1alpha1",
            "kind": "AddOnPlacementScore",
            "metadata": {"name": "resource-usage-score", "namespace": ns}
        }))
        .expect("a score")
    };
    let own = Api::<AddOnPlacementScore>::namespaced(agent_client.clone(), &c1);
    own.create(&PostParams::default(), &score(&c1))
        .await
        .expect("the agent creates its score");
    own.patch_status(
        "resource-usage-score",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": AddOnPlacementScoreStatus::default()})),
    )
    .await
    .expect("the agent patches its score's status");
    let forbidden = |r: Result<AddOnPlacementScore, kube::Error>| matches!(r, Err(kube::Error::Api(s)) if s.code == 403);
    let other = Api::<AddOnPlacementScore>::namespaced(agent_client.clone(), &c2);
    assert!(
        forbidden(other.create(&PostParams::default(), &score(&c2)).await),
        "another cluster's namespace"
    );
    assert!(
        matches!(own.list(&Default::default()).await, Err(kube::Error::Api(s)) if s.code == 403),
        "listing is not granted"
    );
    assert!(
        matches!(own.delete("resource-usage-score", &Default::default()).await, Err(kube::Error::Api(s)) if s.code == 403),
        "deleting is not granted"
    );
    let works = Api::<ManifestWork>::namespaced(agent_client, &c1);
    assert!(
        matches!(works.list(&Default::default()).await, Err(kube::Error::Api(s)) if s.code == 403),
        "nothing but scores"
    );
}

#[tokio::test]
async fn a_subject_the_spoke_writes_reaches_a_rolebinding_only_if_it_is_its_agent() {
    let cp = testenv::shared().await;
    let admin = cp.client().expect("client");
    let addon = "subject-addon";
    apply_agent_role(&admin, addon).await;
    let c1 = cluster(&admin, "subject-cluster").await;
    let c2 = cluster(&admin, "subject-cluster").await;
    create_cma(&admin, addon, json!({"type": "Manual"})).await;
    create_mca(&admin, &c1, addon).await;
    apply_klusterlet_rbac(&admin, &c1).await;
    let _m = start(cp, settings(addon));
    let bindings = Api::<RoleBinding>::namespaced(admin.clone(), &c1);
    let name = format!("open-cluster-management:{addon}:agent");
    eventually("the default binding", DEADLINE, || async {
        bindings.get_opt(&name).await.ok().flatten()
    })
    .await;

    // The spoke's registration agent (its hub identity and OCM's permission on its add-ons'
    // status) declares the token driver with a hostile subject.
    let (user, groups) = registration_agent(&c1);
    let g: Vec<&str> = groups.iter().map(String::as_str).collect();
    let spoke = Api::<ManagedClusterAddOn>::namespaced(
        cp.client_as(&user, &g).expect("registration agent client"),
        &c1,
    );
    let own_sa = format!("system:serviceaccount:{c1}:{c1}-{addon}-agent");
    let injected = format!(
        "{own_sa}\n- apiGroup: rbac.authorization.k8s.io\n  kind: Group\n  name: system:authenticated"
    );
    let other_cluster = format!("system:serviceaccount:{c2}:{c2}-{addon}-agent");
    // (With a group, as the earlier manager bound a token subject only with one.)
    let group = format!("system:serviceaccounts:{c1}");
    let allowed = [
        (
            "User".to_owned(),
            default_user(&c1, addon, &format!("{addon}-agent")),
        ),
        ("Group".to_owned(), default_groups(&c1, addon)[0].clone()),
        ("ServiceAccount".to_owned(), format!("{c1}-{addon}-agent")),
    ];
    for (what, hostile, shown) in [
        (
            "a newline and YAML",
            injected.as_str(),
            "\\n- apiGroup".to_owned(),
        ),
        (
            "another cluster's agent",
            other_cluster.as_str(),
            c2.clone(),
        ),
    ] {
        let status = json!({"status": {
            "kubeClientDriver": "token",
            "registrations": [{"signerName": "kubernetes.io/kube-apiserver-client",
                               "subject": {"user": hostile, "groups": [group]}}]}});
        eventually(
            &format!("{what}: the spoke writes its status"),
            DEADLINE,
            || async {
                // (The manager writes the status too: retry on a conflict.)
                spoke
                    .patch_status(addon, &PatchParams::default(), &Patch::Merge(&status))
                    .await
                    .ok()
            },
        )
        .await;
        let m = eventually(
            &format!("{what}: refused with a condition"),
            DEADLINE,
            || async {
                let m = mca(&admin, &c1, addon).await?;
                // Whatever the binding is meanwhile, it never names anyone else.
                if let Some(b) = bindings.get_opt(&name).await.expect("binding") {
                    let bad: Vec<_> = subjects(&b)
                        .into_iter()
                        .filter(|s| !allowed.contains(s))
                        .collect();
                    assert!(bad.is_empty(), "{what}: bound {bad:?}");
                }
                let refused = condition(&m, "RegistrationApplied").is_some_and(|c| {
                    (c.0, c.1) == ("False", "InvalidSubject") && c.2.contains(&shown)
                });
                (refused && bindings.get_opt(&name).await.ok()?.is_none()).then_some(m)
            },
        )
        .await;
        let message = condition(&m, "RegistrationApplied")
            .map(|c| c.2)
            .unwrap_or_default();
        assert!(
            message.contains("is not this cluster's agent service account")
                && !message.contains('\n'),
            "{what}: {message}"
        );
    }

    // The agent's own service account, as upstream's token driver reports it, is bound.
    let status = json!({"status": {"registrations": [{"signerName": "kubernetes.io/kube-apiserver-client",
        "subject": {"user": own_sa, "groups": null}}]}});
    eventually(
        "the spoke reports its own service account",
        DEADLINE,
        || async {
            spoke
                .patch_status(addon, &PatchParams::default(), &Patch::Merge(&status))
                .await
                .ok()
        },
    )
    .await;
    let b = eventually("the agent's service account is bound", DEADLINE, || async {
        let m = mca(&admin, &c1, addon).await?;
        let applied = condition(&m, "RegistrationApplied").map(|c| c.0) == Some("True");
        let b = bindings.get_opt(&name).await.ok()??;
        applied.then_some(b)
    })
    .await;
    assert_eq!(subjects(&b), [allowed[2].clone()]);
    assert_eq!(
        b.subjects.as_ref().and_then(|s| s[0].namespace.as_deref()),
        Some(c1.as_str())
    );
}
