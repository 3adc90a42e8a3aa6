//! The example against a real apiserver: three clusters whose endpoints answer at once, after
//! 300 ms, and not at all.

use std::time::Duration;

use kube::api::Api;
use ocm_api::AddOnPlacementScore;
use score_provider::{HubClient, Runner, Settings, WriteSettings};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::Latency;

/// A minimal HTTP server on a free port answering 200 after `delay`.
async fn endpoint(delay: Duration) -> hyper::Uri {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind a port");
    let port = listener.local_addr().expect("local address").port();
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 2048];
                let _ = conn.read(&mut buf).await;
                tokio::time::sleep(delay).await;
                let _ = conn
                    .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
                    .await;
            });
        }
    });
    format!("http://127.0.0.1:{port}/healthz")
        .parse()
        .expect("a URI")
}

#[tokio::test]
async fn faster_clusters_score_higher_and_dead_ones_say_why() {
    let cp = testenv::shared().await;
    let admin = cp.client().expect("admin client");
    let mut clusters = Vec::new();
    for prefix in ["lat-fast", "lat-slow", "lat-dead"] {
        clusters.push(testenv::namespace(&admin, prefix).await.expect("namespace"));
    }
    // A port that was free a moment ago: nothing listens there.
    let dead: hyper::Uri = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = l.local_addr().expect("address").port();
        format!("http://127.0.0.1:{port}/").parse().expect("a URI")
    };
    let targets = vec![
        (clusters[0].clone(), endpoint(Duration::ZERO).await),
        (
            clusters[1].clone(),
            endpoint(Duration::from_millis(300)).await,
        ),
        (clusters[2].clone(), dead),
    ];
    let provider = Latency {
        targets,
        max_latency: Duration::from_secs(1),
    };
    let settings = Settings::new(WriteSettings {
        score_name: "latency-score".into(),
        ttl: Duration::from_secs(30),
        period: Duration::from_secs(10),
        renew_every: Duration::from_secs(10),
        hysteresis: 0,
        manager: "latency-provider".into(),
    });
    let runner = Runner::new(provider, HubClient::fixed(admin.clone()), settings);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(runner.run(async {
        let _ = stopped.await;
    }));

    let read = |ns: &str| {
        let api: Api<AddOnPlacementScore> = Api::namespaced(admin.clone(), ns);
        async move {
            api.get_opt("latency-score")
                .await
                .ok()
                .flatten()
                .and_then(|o| o.status)
        }
    };
    let latency = |s: &ocm_api::AddOnPlacementScoreStatus| {
        s.scores
            .iter()
            .find(|i| i.name == "latency")
            .map(|i| i.value)
    };
    let (fast, slow, dead) = testenv::eventually(
        "every cluster's outcome",
        Duration::from_secs(60),
        || async {
            let (f, s, d) = (
                read(&clusters[0]).await,
                read(&clusters[1]).await,
                read(&clusters[2]).await,
            );
            let f_score = f.as_ref().and_then(latency)?;
            let s_score = s.as_ref().and_then(latency)?;
            let d_cond = d.as_ref().and_then(|d| d.conditions.first().cloned())?;
            Some((f_score, s_score, d_cond))
        },
    )
    .await;
    // The endpoint that answers 300 ms later scores lower, whatever the machine's load adds to
    // both (the probes run side by side); 300 ms of a 1 s range cannot score above 40. How fast
    // an instant answer is stays out of the test: a busy machine slows every probe.
    assert!(fast > slow, "fast endpoint scored {fast}, slow {slow}");
    assert!(slow <= 40 && slow > -100, "slow endpoint scored {slow}");
    assert_eq!(
        (d_status(&dead), dead.reason.as_str()),
        ("False", "ProbeFailed"),
        "{dead:?}"
    );
    let dead_status = read(&clusters[2]).await.expect("dead cluster's object");
    assert!(dead_status.scores.is_empty() && dead_status.valid_until.is_none());
    let _ = stop.send(());
    task.await.expect("the runner stops");
}

fn d_status(c: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition) -> &str {
    c.status.as_str()
}
