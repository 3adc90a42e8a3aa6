//! The chart's admission policy for the manager's service account: what a stolen manager token
//! may still write. Every request here is made as that service account (impersonated, under
//! the chart's RBAC and ValidatingAdmissionPolicy), never as the admin.

use super::*;

use ocm_api::addon::v1alpha1::AddOnDeploymentConfigSpec;
use resource_usage_hub::manager::render::{self, Rendered};

/// The manager's renderings for `cluster`: without a config, and with an AddOnDeploymentConfig
/// that sets everything the renderer applies (install namespace, variables, node placement,
/// registries, resources) and a proxy.
fn renderings(addon: &str, cluster: &str) -> Vec<(&'static str, Rendered)> {
    let template = AgentTemplate {
        addon_name: addon.to_owned(),
        image: IMAGE.to_owned(),
        default_install_namespace: AGENT_NS.to_owned(),
        definitions: String::new(),
    };
    let full: AddOnDeploymentConfigSpec = serde_json::from_value(json!({
        "agentInstallNamespace": "custom-agents",
        "customizedVariables": [
            {"name": "CPU_RANGE", "value": "0:64"},
            {"name": "HTTPS_PROXY", "value": "http://proxy.example.com:3128"}
        ],
        "nodePlacement": {
            "nodeSelector": {"node-role.kubernetes.io/infra": ""},
            "tolerations": [{"key": "node-role.kubernetes.io/infra", "operator": "Exists", "effect": "NoSchedule"}]
        },
        "registries": [{"source": "quay.io/ocm-placement", "mirror": "registry.example.com/mirror"}],
        "resourceRequirements": [{"containerID": "deployments:*:*",
            "resources": {"requests": {"cpu": "20m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}}}],
        "proxyConfig": {"httpProxy": "http://proxy.example.com:3128", "noProxy": "10.0.0.0/8"}
    }))
    .expect("an AddOnDeploymentConfig");
    vec![
        (
            "no config",
            render::render(&template, cluster, None).expect("render"),
        ),
        (
            "every AddOnDeploymentConfig field",
            render::render(&template, cluster, Some(&full)).expect("render"),
        ),
    ]
}

/// The work `rendered` as the manager writes it, as JSON (to be bent by the attacks).
fn work_json(addon: &str, cluster: &str, rendered: &Rendered) -> Value {
    json!({
        "apiVersion": "work.open-cluster-management.io/v1",
        "kind": "ManifestWork",
        "metadata": {"name": format!("addon-{addon}-deploy-0"), "namespace": cluster,
            "labels": {"open-cluster-management.io/addon-name": addon}},
        "spec": rendered.spec,
    })
}

/// The manifest of `kind` in a work's JSON.
fn manifest<'a>(work: &'a mut Value, kind: &str) -> &'a mut Value {
    work["spec"]["workload"]["manifests"]
        .as_array_mut()
        .and_then(|m| m.iter_mut().find(|m| m["kind"] == kind))
        .unwrap_or_else(|| panic!("no {kind} in the rendering"))
}

fn add_manifest(work: &mut Value, object: Value) {
    if let Some(m) = work["spec"]["workload"]["manifests"].as_array_mut() {
        m.push(object);
    }
}

/// How the apiserver answered a write: `None` when it was admitted, else the refusal.
fn outcome<T>(r: Result<T, kube::Error>) -> Option<String> {
    match r {
        Ok(_) => None,
        Err(kube::Error::Api(s)) => Some(format!("{} {}", s.code, s.message)),
        Err(e) => Some(e.to_string()),
    }
}

fn dry_run() -> PostParams {
    PostParams {
        dry_run: true,
        field_manager: None,
    }
}

/// The attacks of a stolen manager token: a RoleBinding and a ManifestWork of the allowed names
/// outside any cluster namespace, and works of the allowed name in a cluster namespace that
/// carry more than the agent: a cluster-admin binding for `system:unauthenticated`, a
/// privileged hostPath DaemonSet, other kinds, objects in other namespaces, wider rules, a
/// privileged agent pod in each way the pod spec allows. Each is refused as a create and as an
/// update of the stored work, while the manager's own renderings (with and without an
/// AddOnDeploymentConfig) are admitted as creates and updates.
#[tokio::test]
async fn the_manager_token_writes_only_the_agent_into_cluster_namespaces() {
    let cp = testenv::shared().await;
    let admin = cp.client().expect("client");
    let addon = "vap-addon";
    let system = namespace(&admin, "vap-manager").await;
    common::apply_manager_rbac(&admin, addon, &system, MANAGER_ACCOUNT).await;
    let manager = cp
        .client_as_service_account(&system, MANAGER_ACCOUNT)
        .expect("the manager's client");
    let c1 = cluster(&admin, "vap-c1").await;
    let c2 = cluster(&admin, "vap-c2").await;
    let works = |ns: &str| Api::<ManifestWork>::namespaced(manager.clone(), ns);
    let rendered = renderings(addon, &c1);
    let legit = work_json(addon, &c1, &rendered[0].1);

    // The policy is in force once the apiserver has loaded it and its binding (an informer,
    // so a moment after they are written, longer on a busy machine); until then the writes it
    // refuses go through. Waited for with a dry run it must refuse.
    let mut probe = legit.clone();
    add_manifest(
        &mut probe,
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "probe", "namespace": "default"}}),
    );
    let probe: ManifestWork = serde_json::from_value(probe).expect("a work");
    testenv::eventually("the admission policy in force", DEADLINE, || {
        let (api, probe) = (works(&c1), probe.clone());
        async move {
            outcome(api.create(&dry_run(), &probe).await).filter(|m| {
                m.starts_with("403") && m.contains("may carry only the agent's objects")
            })
        }
    })
    .await;

    // (what, the object, the refusal's message must contain)
    let mut creates: Vec<(String, Value, &str)> = Vec::new();
    let wrong_place = "managed cluster namespace";
    let only_agent = "may carry only the agent's objects";
    let one_ns = "in the agent's one namespace";
    let rules = "only the agent's rules";
    let binds = "may bind only the agent's roles";
    let pod = "may run only the agent's pod";
    let container = "may run no privileged container";

    let kube_system_work = work_json(addon, "kube-system", &renderings(addon, "kube-system")[0].1);
    creates.push((
        "the add-on's ManifestWork in kube-system".into(),
        kube_system_work,
        wrong_place,
    ));

    let mut w = legit.clone();
    add_manifest(
        &mut w,
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": "pwn"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:unauthenticated"}]}),
    );
    creates.push((
        "a cluster-admin ClusterRoleBinding for system:unauthenticated".into(),
        w,
        only_agent,
    ));

    let mut w = legit.clone();
    let crb = manifest(&mut w, "ClusterRoleBinding");
    crb["roleRef"]["name"] = json!("cluster-admin");
    crb["subjects"] = json!([{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:unauthenticated"}]);
    creates.push((
        "the agent's ClusterRoleBinding to cluster-admin for system:unauthenticated".into(),
        w,
        binds,
    ));

    let mut w = legit.clone();
    manifest(&mut w, "ClusterRoleBinding")["subjects"] = json!([
        {"kind": "ServiceAccount", "name": format!("{addon}-agent"), "namespace": AGENT_NS},
        {"kind": "ServiceAccount", "name": "default", "namespace": "kube-system"}]);
    creates.push((
        "the agent's ClusterRoleBinding with another subject".into(),
        w,
        binds,
    ));

    let mut w = legit.clone();
    manifest(&mut w, "RoleBinding")["roleRef"] =
        json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "admin"});
    creates.push((
        "the agent's RoleBinding to the ClusterRole admin".into(),
        w,
        binds,
    ));

    let mut w = legit.clone();
    add_manifest(
        &mut w,
        json!({"apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": "node-root", "namespace": AGENT_NS},
            "spec": {"selector": {"matchLabels": {"app": "node-root"}},
                "template": {"metadata": {"labels": {"app": "node-root"}},
                    "spec": {"hostPID": true, "hostNetwork": true,
                        "containers": [{"name": "root", "image": "busybox",
                            "securityContext": {"privileged": true},
                            "volumeMounts": [{"name": "host", "mountPath": "/host"}]}],
                        "volumes": [{"name": "host", "hostPath": {"path": "/"}}]}}}}),
    );
    creates.push(("a privileged hostPath DaemonSet".into(), w, only_agent));

    for extra in [
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "x", "namespace": AGENT_NS}}),
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "x"}}),
        json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration", "metadata": {"name": "x"}}),
        json!({"apiVersion": "example.com/v1", "kind": "Deployment", "metadata": {"name": format!("{addon}-agent"), "namespace": AGENT_NS}}),
    ] {
        let mut w = legit.clone();
        let what = format!("an extra {} {}", extra["apiVersion"], extra["kind"]);
        add_manifest(&mut w, extra);
        creates.push((what, w, only_agent));
    }

    let mut w = legit.clone();
    manifest(&mut w, "Role")["metadata"]["namespace"] = json!("kube-system");
    creates.push(("the agent's Role in kube-system".into(), w, one_ns));

    let mut w = legit.clone();
    manifest(&mut w, "ServiceAccount")["metadata"]["namespace"] = json!("kube-system");
    creates.push((
        "the agent's ServiceAccount in kube-system".into(),
        w,
        one_ns,
    ));

    let mut w = legit.clone();
    manifest(&mut w, "ClusterRole")["rules"] =
        json!([{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]);
    creates.push(("the agent's ClusterRole granting *".into(), w, rules));

    let mut w = legit.clone();
    manifest(&mut w, "ClusterRole")["aggregationRule"] = json!({"clusterRoleSelectors": [
        {"matchLabels": {"rbac.authorization.k8s.io/aggregate-to-admin": "true"}}]});
    creates.push(("the agent's ClusterRole aggregating admin".into(), w, rules));

    let mut w = legit.clone();
    manifest(&mut w, "Role")["rules"] =
        json!([{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list"]}]);
    creates.push(("the agent's Role reading Secrets".into(), w, rules));

    let pod_edits: Vec<(&str, Value, &str)> = vec![
        (
            "privileged",
            json!({"containers": [{"name": "agent", "securityContext": {"privileged": true}}]}),
            container,
        ),
        (
            "allowPrivilegeEscalation",
            json!({"containers": [{"name": "agent", "securityContext": {"allowPrivilegeEscalation": true}}]}),
            container,
        ),
        (
            "capability SYS_ADMIN",
            json!({"containers": [{"name": "agent", "securityContext": {"capabilities": {"add": ["SYS_ADMIN"]}}}]}),
            container,
        ),
        (
            "a privileged init container",
            json!({"initContainers": [{"name": "init", "image": "busybox", "securityContext": {"privileged": true}}]}),
            container,
        ),
        (
            "env from a Secret",
            json!({"containers": [{"name": "agent", "env": [{"name": "T", "valueFrom": {"secretKeyRef": {"name": "other-hub-kubeconfig", "key": "kubeconfig"}}}]}]}),
            container,
        ),
        (
            "a host port",
            json!({"containers": [{"name": "agent", "ports": [{"containerPort": 8080, "hostPort": 80}]}]}),
            container,
        ),
        (
            "a hostPath volume",
            json!({"volumes": [{"name": "host", "hostPath": {"path": "/"}}]}),
            pod,
        ),
        (
            "another Secret as a volume",
            json!({"volumes": [{"name": "hub-kubeconfig", "secret": {"secretName": "other-addon-hub-kubeconfig"}}]}),
            pod,
        ),
        ("hostNetwork", json!({"hostNetwork": true}), pod),
        ("hostPID", json!({"hostPID": true}), pod),
        ("hostIPC", json!({"hostIPC": true}), pod),
        (
            "another ServiceAccount",
            json!({"serviceAccountName": "default"}),
            pod,
        ),
    ];
    for (what, edit, message) in &pod_edits {
        let mut w = legit.clone();
        let spec = &mut manifest(&mut w, "Deployment")["spec"]["template"]["spec"];
        for (k, v) in edit.as_object().into_iter().flatten() {
            if k == "containers" {
                // Merge into the agent container, as a strategic merge by name would.
                let mut c = spec["containers"][0].clone();
                for (ck, cv) in v[0].as_object().into_iter().flatten() {
                    c[ck] = cv.clone();
                }
                spec["containers"][0] = c;
            } else {
                spec[k] = v.clone();
            }
        }
        creates.push((format!("the agent's Deployment with {what}"), w, message));
    }

    let mut w = legit.clone();
    w["spec"]["executor"] = json!({"subject": {"type": "ServiceAccount",
        "serviceAccount": {"namespace": "kube-system", "name": "default"}}});
    creates.push(("an executor".into(), w, "no executor"));

    let mut failures = Vec::new();

    // A RoleBinding of the agent's name, to the agent's ClusterRole, outside cluster namespaces.
    let kube_system_binding: RoleBinding = serde_json::from_value(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": format!("open-cluster-management:{addon}:agent"), "namespace": "kube-system"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": format!("open-cluster-management:{addon}:agent-hub")},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group",
            "name": format!("system:open-cluster-management:cluster:kube-system:addon:{addon}")}]
    }))
    .expect("a RoleBinding");
    match outcome(
        Api::<RoleBinding>::namespaced(manager.clone(), "kube-system")
            .create(&dry_run(), &kube_system_binding)
            .await,
    ) {
        Some(m) if m.starts_with("403") && m.contains(wrong_place) => {}
        other => failures.push(format!(
            "create the agent's RoleBinding in kube-system: {other:?}"
        )),
    }

    // Creates (dry run: the next one is a create again).
    for (what, w, message) in &creates {
        let ns = w["metadata"]["namespace"].as_str().unwrap_or_default();
        let obj: ManifestWork = serde_json::from_value(w.clone()).expect("a work");
        match outcome(works(ns).create(&dry_run(), &obj).await) {
            Some(m) if m.starts_with("403") && m.contains(message) => {}
            other => failures.push(format!("create, {what}: {other:?}")),
        }
    }

    // The manager's own renderings are admitted: created in c2 and c1 by server-side apply as
    // the manager applies them, then updated to the other rendering.
    let apply = PatchParams::apply("addon-manager").force();
    let work_name = format!("addon-{addon}-deploy-0");
    for cluster in [&c1, &c2] {
        let renderings = renderings(addon, cluster);
        for (what, r) in renderings.iter().chain(renderings.iter().rev()) {
            if let Some(m) = outcome(
                works(cluster)
                    .patch(
                        &work_name,
                        &apply,
                        &Patch::Apply(work_json(addon, cluster, r)),
                    )
                    .await,
            ) {
                failures.push(format!(
                    "apply the manager's rendering ({what}) in {cluster}: {m}"
                ));
            }
        }
    }

    // Updates of the stored work, by server-side apply (dry run).
    let mut dry_apply = apply.clone();
    dry_apply.dry_run = true;
    for (what, w, message) in creates
        .iter()
        .filter(|(_, w, _)| w["metadata"]["namespace"] == c1.as_str())
    {
        match outcome(
            works(&c1)
                .patch(&work_name, &dry_apply, &Patch::Apply(w))
                .await,
        ) {
            Some(m) if m.starts_with("403") && m.contains(message) => {}
            other => failures.push(format!("update, {what}: {other:?}")),
        }
    }

    // The RoleBinding the manager writes in a cluster namespace is still admitted.
    let mut binding = kube_system_binding.clone();
    binding.metadata.namespace = Some(c1.clone());
    binding.subjects = Some(vec![k8s_openapi::api::rbac::v1::Subject {
        api_group: Some("rbac.authorization.k8s.io".into()),
        kind: "Group".into(),
        name: format!("system:open-cluster-management:cluster:{c1}:addon:{addon}"),
        namespace: None,
    }]);
    if let Some(m) = outcome(
        Api::<RoleBinding>::namespaced(manager.clone(), &c1)
            .create(&PostParams::default(), &binding)
            .await,
    ) {
        failures.push(format!("create the agent's RoleBinding in {c1}: {m}"));
    }

    assert!(
        failures.is_empty(),
        "{} writes went the wrong way:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
