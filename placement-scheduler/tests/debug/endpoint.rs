//! The endpoint served on loopback (plain and TLS) in front of a real kube-apiserver: real
//! ServiceAccounts, TokenReview, SubjectAccessReview against real RBAC.

use super::*;

// ---------------------------------------------------------------------------------------------
// Against a real apiserver

#[tokio::test]
async fn get_with_permission_to_get_placements_schedules_the_stored_placement() {
    let cp = testenv::shared().await;
    let admin = cp.client().unwrap();
    let ns = testenv::namespace(&admin, "debug-get").await.unwrap();
    let other_ns = testenv::namespace(&admin, "debug-get-other").await.unwrap();
    let token = service_account(&admin, &ns, "reader").await;
    grant(&admin, &ns, "reader", &["get"]).await;
    let server = start(admin.clone(), fleet(&ns), None).await;

    let path = format!("/debug/placements/{ns}/web");
    let reply = eventually(
        || server.get(&path, &token),
        |r| r.status != StatusCode::FORBIDDEN,
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
    assert_eq!(reply.content_type, "application/json");
    assert_eq!(reply.body, expected_web(&ns));

    // `get` does not allow a what-if (`create`), nor anything in another namespace.
    let reply = server.post(token.as_str(), what_if(&ns).to_string()).await;
    reply.assert_error(
        StatusCode::FORBIDDEN,
        &format!("user does not have permission to create placements in namespace {ns}"),
    );
    let reply = server
        .get(&format!("/debug/placements/{other_ns}/web"), &token)
        .await;
    reply.assert_error(
        StatusCode::FORBIDDEN,
        &format!("user does not have permission to get placements in namespace {other_ns}"),
    );
}

#[tokio::test]
async fn a_service_account_without_rbac_is_forbidden() {
    let cp = testenv::shared().await;
    let admin = cp.client().unwrap();
    let ns = testenv::namespace(&admin, "debug-norbac").await.unwrap();
    let token = service_account(&admin, &ns, "nobody").await;
    let server = start(admin.clone(), fleet(&ns), None).await;

    let reply = server
        .get(&format!("/debug/placements/{ns}/web"), &token)
        .await;
    reply.assert_error(
        StatusCode::FORBIDDEN,
        &format!("user does not have permission to get placements in namespace {ns}"),
    );
    // Which placements exist is not told to someone who may not read them: 403, not 404.
    let reply = server
        .get(&format!("/debug/placements/{ns}/no-such"), &token)
        .await;
    assert_eq!(reply.status, StatusCode::FORBIDDEN, "{reply:?}");
    let reply = server.post(token.as_str(), what_if(&ns).to_string()).await;
    reply.assert_error(
        StatusCode::FORBIDDEN,
        &format!("user does not have permission to create placements in namespace {ns}"),
    );
}

#[tokio::test]
async fn missing_or_invalid_tokens_are_unauthorized() {
    let cp = testenv::shared().await;
    let admin = cp.client().unwrap();
    let ns = testenv::namespace(&admin, "debug-authn").await.unwrap();
    let token = service_account(&admin, &ns, "short-lived").await;
    grant(&admin, &ns, "short-lived", &["get", "create"]).await;
    let server = start(admin.clone(), fleet(&ns), None).await;
    let path = format!("/debug/placements/{ns}/web");

    for authorization in [
        None,
        Some("Bearer"),
        Some("Bearer garbage"),
        Some("Basic cmVhZGVyOnNlY3JldA=="),
    ] {
        let reply = server
            .request(Method::GET, &path, authorization, Bytes::new())
            .await;
        reply.assert_error(StatusCode::UNAUTHORIZED, "Unauthorized");
        assert_eq!(reply.www_authenticate.as_deref(), Some("Bearer"));
    }
    // Authentication comes first, whatever the method, path or body.
    for (method, path) in [
        (Method::DELETE, path.as_str()),
        (Method::GET, "/debug/placements/only-a-name"),
        (Method::POST, "/debug/placements/"),
        (Method::GET, "/elsewhere"),
    ] {
        let reply = server
            .request(method, path, Some("Bearer garbage"), "{")
            .await;
        reply.assert_error(StatusCode::UNAUTHORIZED, "Unauthorized");
    }

    // A real token works until its ServiceAccount is deleted.
    let reply = eventually(
        || server.get(&path, &token),
        |r| r.status != StatusCode::FORBIDDEN,
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
    Api::<ServiceAccount>::namespaced(admin.clone(), &ns)
        .delete("short-lived", &DeleteParams::default())
        .await
        .unwrap();
    let reply = eventually(
        || server.get(&path, &token),
        |r| r.status == StatusCode::UNAUTHORIZED,
    )
    .await;
    reply.assert_error(StatusCode::UNAUTHORIZED, "Unauthorized");
}

#[tokio::test]
async fn a_what_if_post_schedules_the_unsaved_placement() {
    let cp = testenv::shared().await;
    let admin = cp.client().unwrap();
    let ns = testenv::namespace(&admin, "debug-post").await.unwrap();
    let other_ns = testenv::namespace(&admin, "debug-post-other")
        .await
        .unwrap();
    let token = service_account(&admin, &ns, "planner").await;
    grant(&admin, &ns, "planner", &["create"]).await;
    let server = start(admin.clone(), fleet(&ns), None).await;

    let body = what_if(&ns).to_string();
    let reply = eventually(
        || server.post(token.as_str(), body.clone()),
        |r| r.status != StatusCode::FORBIDDEN,
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
    assert_eq!(reply.content_type, "application/json");
    let mut placement = what_if(&ns);
    let spec: Placement = serde_json::from_value(placement.clone()).unwrap();
    placement["spec"] = serde_json::to_value(&spec.spec).unwrap();
    assert_eq!(
        reply.body,
        json!({
            "placement": placement,
            "filteredPipelineResults": [
                {"name": "Predicate", "filteredClusters": ["c1", "c2", "c3", "c4"]},
                {"name": "Predicate,TaintToleration",
                 "filteredClusters": ["c4", "c1", "c3", "c2"]}
            ],
            "prioritizeResults": [
                {"name": "AddOn/demo/demo", "weight": 1,
                 "scores": {"c1": 50, "c2": -20, "c3": 0, "c4": 70}}
            ],
            "aggregatedScores": [
                {"clusterName": "c4", "score": 70},
                {"clusterName": "c1", "score": 50},
                {"clusterName": "c3", "score": 0},
                {"clusterName": "c2", "score": -20}
            ]
        })
    );

    // `create` does not allow GET (`get`).
    let reply = server
        .get(&format!("/debug/placements/{ns}/web"), &token)
        .await;
    reply.assert_error(
        StatusCode::FORBIDDEN,
        &format!("user does not have permission to get placements in namespace {ns}"),
    );
    // The namespace reviewed is the body's.
    let reply = server
        .post(token.as_str(), what_if(&other_ns).to_string())
        .await;
    reply.assert_error(
        StatusCode::FORBIDDEN,
        &format!("user does not have permission to create placements in namespace {other_ns}"),
    );
}

/// A Placement exactly as Go's `encoding/json` writes one built with upstream's test helper
/// (`NewPlacement("ns1", "go-placement").WithClusterSets("prod-set").WithNOC(2)`): `null` for
/// its empty status lists, empty structs written out.
const GO_PLACEMENT: &str = include_str!("../../../ocm-api/tests/fixtures/go-json/placement.json");

#[tokio::test]
async fn a_what_if_post_as_go_marshals_it_is_read_as_go_reads_it() {
    let cp = testenv::shared().await;
    let admin = cp.client().unwrap();
    let ns = testenv::namespace(&admin, "debug-go").await.unwrap();
    let token = service_account(&admin, &ns, "planner").await;
    grant(&admin, &ns, "planner", &["create"]).await;
    let server = start(admin.clone(), fleet(&ns), None).await;

    // Go's bytes, in the test's namespace.
    assert!(GO_PLACEMENT.contains(r#""decisionGroups":null,"conditions":null"#));
    let go_body = GO_PLACEMENT.replace(r#""namespace":"ns1""#, &format!(r#""namespace":"{ns}""#));
    assert_ne!(go_body, GO_PLACEMENT);
    let reply = eventually(
        || server.post(token.as_str(), go_body.clone()),
        |r| r.status != StatusCode::FORBIDDEN,
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
    // The prod-set clusters; c3's taint is not tolerated. Two of them, by the default scores.
    assert_eq!(
        reply.body["filteredPipelineResults"],
        json!([
            {"name": "Predicate", "filteredClusters": ["c1", "c2", "c3", "c4"]},
            {"name": "Predicate,TaintToleration", "filteredClusters": ["c4", "c1", "c2"]}
        ])
    );
    assert_eq!(reply.body["placement"]["metadata"]["name"], "go-placement");

    // The same answer as for the Placement with its nulls left out.
    let mut without_nulls: Value = serde_json::from_str(&go_body).unwrap();
    let status = without_nulls["status"].as_object_mut().unwrap();
    status.retain(|_, v| !v.is_null());
    assert_eq!(status.len(), 1);
    let reply_without = server.post(token.as_str(), without_nulls.to_string()).await;
    assert_eq!(reply_without.status, StatusCode::OK, "{reply_without:?}");
    assert_eq!(reply.body, reply_without.body);

    // Null everywhere Go could write it: metadata, spec and every optional list in them.
    let nulls = json!({
        "apiVersion": null, "kind": null,
        "metadata": {"name": "go-placement", "namespace": ns, "labels": null,
                     "annotations": null, "creationTimestamp": null, "ownerReferences": null},
        "spec": {"clusterSets": ["prod-set"], "numberOfClusters": 2, "predicates": null,
                 "prioritizerPolicy": {"mode": null, "configurations": null},
                 "spreadPolicy": {"spreadConstraints": null}, "tolerations": null,
                 "decisionStrategy": {"groupStrategy": {"decisionGroups": null,
                                                        "clustersPerDecisionGroup": 0}},
                 "sortBy": null, "scoreRateLimit": null},
        "status": null
    });
    let reply_nulls = server.post(token.as_str(), nulls.to_string()).await;
    assert_eq!(reply_nulls.status, StatusCode::OK, "{reply_nulls:?}");
    assert_eq!(reply.body, reply_nulls.body);
}

#[tokio::test]
async fn bad_requests_are_refused_with_upstreams_messages() {
    let cp = testenv::shared().await;
    let admin = cp.client().unwrap();
    let ns = testenv::namespace(&admin, "debug-bad").await.unwrap();
    let token = service_account(&admin, &ns, "both").await;
    grant(&admin, &ns, "both", &["get", "create"]).await;
    let server = start(admin.clone(), fleet(&ns), None).await;
    let bearer = format!("Bearer {token}");

    // Wait until RBAC lets "both" in.
    let path = format!("/debug/placements/{ns}/web");
    let reply = eventually(
        || server.get(&path, &token),
        |r| r.status != StatusCode::FORBIDDEN,
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
    let reply = eventually(
        || server.post(token.as_str(), what_if(&ns).to_string()),
        |r| r.status != StatusCode::FORBIDDEN,
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");

    for p in [
        "/debug/placements/",
        "/debug/placements/only-a-name",
        &format!("/debug/placements/{ns}/"),
        &format!("/debug/placements/{ns}/web/extra"),
    ] {
        server.get(p, &token).await.assert_error(
            StatusCode::BAD_REQUEST,
            "invalid debug path: namespace and name required",
        );
    }
    server
        .get(&format!("/debug/placements/{ns}/no-such"), &token)
        .await
        .assert_error(StatusCode::NOT_FOUND, "placement 'no-such' not found");
    server
        .get("/debug/other", &token)
        .await
        .assert_error(StatusCode::NOT_FOUND, "path /debug/other not found");
    for method in [Method::DELETE, Method::PUT, Method::PATCH, Method::HEAD] {
        let reply = server
            .request(method.clone(), &path, Some(&bearer), Bytes::new())
            .await;
        if method == Method::HEAD {
            // No body comes back to a HEAD; the status says it.
            assert_eq!(reply.status, StatusCode::METHOD_NOT_ALLOWED);
            continue;
        }
        reply.assert_error(
            StatusCode::METHOD_NOT_ALLOWED,
            &format!("method {method} not allowed"),
        );
    }

    server.post(token.as_str(), "{").await.assert_error(
        StatusCode::BAD_REQUEST,
        "failed to unmarshal placement JSON: ",
    );
    server
        .post(token.as_str(), r#"{"spec": {"numberOfClusters": "two"}}"#)
        .await
        .assert_error(
            StatusCode::BAD_REQUEST,
            "failed to unmarshal placement JSON: ",
        );
    for no_namespace in [
        r#"{"metadata": {"name": "x"}}"#,
        "{}",
        r#"{"metadata": {"namespace": ""}}"#,
        r#"{"metadata": null, "spec": null}"#,
        r#"{"metadata": {"name": "x", "namespace": null}}"#,
    ] {
        server
            .post(token.as_str(), no_namespace)
            .await
            .assert_error(
                StatusCode::BAD_REQUEST,
                "placement JSON has no metadata.namespace",
            );
    }
    server.post(token.as_str(), "[]").await.assert_error(
        StatusCode::BAD_REQUEST,
        "failed to unmarshal placement JSON: ",
    );
    // A Placement without spec, or with a null one, is Go's zero spec: every cluster of the
    // bound sets, scored by the defaults.
    for bare in [
        json!({"metadata": {"name": "bare", "namespace": ns}}),
        json!({"metadata": {"name": "bare", "namespace": ns}, "spec": null}),
    ] {
        let reply = server.post(token.as_str(), bare.to_string()).await;
        assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
        assert_eq!(
            reply.body["filteredPipelineResults"][0],
            json!({"name": "Predicate", "filteredClusters": ["c1", "c2", "c3", "c4"]})
        );
        assert_eq!(
            reply.body["filteredPipelineResults"][1]["filteredClusters"],
            json!(["c4", "c1", "c2"])
        );
    }
    server
        .post(token.as_str(), vec![b' '; MAX_REQUEST_BODY_BYTES + 1])
        .await
        .assert_error(
            StatusCode::BAD_REQUEST,
            "request body too large: 1048577 bytes exceeds maximum of 1048576 bytes",
        );
    // Exactly the limit is read (JSON may be padded with whitespace).
    let mut padded = what_if(&ns).to_string().into_bytes();
    padded.resize(MAX_REQUEST_BODY_BYTES, b' ');
    let reply = server.post(token.as_str(), padded).await;
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
}

#[tokio::test]
async fn over_tls_with_a_self_signed_certificate() {
    let cp = testenv::shared().await;
    let admin = cp.client().unwrap();
    let ns = testenv::namespace(&admin, "debug-tls").await.unwrap();
    let token = service_account(&admin, &ns, "reader").await;
    grant(&admin, &ns, "reader", &["get"]).await;
    let server = start(admin.clone(), fleet(&ns), Some(self_signed_tls())).await;

    let path = format!("/debug/placements/{ns}/web");
    let reply = eventually(
        || server.get(&path, &token),
        |r| r.status != StatusCode::FORBIDDEN,
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
    assert_eq!(reply.body, expected_web(&ns));
    server
        .request(Method::GET, &path, None, Bytes::new())
        .await
        .assert_error(StatusCode::UNAUTHORIZED, "Unauthorized");

    // Plain HTTP to the TLS port gets no answer.
    let plain = Server {
        addr: server.addr,
        tls: None,
        stop: None,
    };
    let tcp = TcpStream::connect(plain.addr).await.unwrap();
    let req = Request::get(path.as_str())
        .header(header::HOST, plain.addr.to_string())
        .body(Full::new(Bytes::new()))
        .unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
        .await
        .unwrap();
    tokio::spawn(conn);
    assert!(sender.send_request(req).await.is_err());
}

#[tokio::test]
async fn reviews_the_server_may_not_make_are_server_errors() {
    let cp = testenv::shared().await;
    let admin = cp.client().unwrap();
    let ns = testenv::namespace(&admin, "debug-500").await.unwrap();
    let token = service_account(&admin, &ns, "reader").await;
    grant(&admin, &ns, "reader", &["get"]).await;
    // The server acts as an identity that may create TokenReviews only once granted below,
    // and never SubjectAccessReviews.
    let identity = format!("debug-server-{ns}");
    let server = start(cp.client_as(&identity, &[]).unwrap(), fleet(&ns), None).await;
    let path = format!("/debug/placements/{ns}/web");

    server.get(&path, &token).await.assert_error(
        StatusCode::INTERNAL_SERVER_ERROR,
        "failed to authenticate the request: ",
    );

    let role = ClusterRole {
        metadata: ObjectMeta {
            name: Some(identity.clone()),
            ..Default::default()
        },
        rules: Some(vec![PolicyRule {
            api_groups: Some(vec!["authentication.k8s.io".into()]),
            resources: Some(vec!["tokenreviews".into()]),
            verbs: vec!["create".into()],
            ..Default::default()
        }]),
        ..Default::default()
    };
    Api::<ClusterRole>::all(admin.clone())
        .create(&PostParams::default(), &role)
        .await
        .unwrap();
    let binding = ClusterRoleBinding {
        metadata: ObjectMeta {
            name: Some(identity.clone()),
            ..Default::default()
        },
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".into(),
            kind: "ClusterRole".into(),
            name: identity.clone(),
        },
        subjects: Some(vec![Subject {
            kind: "User".into(),
            name: identity.clone(),
            api_group: Some("rbac.authorization.k8s.io".into()),
            ..Default::default()
        }]),
    };
    Api::<ClusterRoleBinding>::all(admin.clone())
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();

    let reply = eventually(
        || server.get(&path, &token),
        |r| !r.error().starts_with("failed to authenticate"),
    )
    .await;
    reply.assert_error(
        StatusCode::INTERNAL_SERVER_ERROR,
        "failed to check permissions: ",
    );

    // Cluster-scoped objects outlive the namespace: remove them.
    Api::<ClusterRoleBinding>::all(admin.clone())
        .delete(&identity, &DeleteParams::default())
        .await
        .unwrap();
    Api::<ClusterRole>::all(admin.clone())
        .delete(&identity, &DeleteParams::default())
        .await
        .unwrap();
}
