//! A client that follows its kubeconfig file: rebuilt when that file or the files it names
//! change. OCM's registration agent rotates an add-on's client certificate in the mounted
//! `<addon>-hub-kubeconfig` secret before it expires, and an agent on a managed cluster must
//! go on with the new one without a restart.
//!
//! Nothing watches the files: the owner calls [`KubeconfigClient::reload_if_changed`] on its
//! own schedule (and when the hub refuses the credentials), so that it decides what a new
//! client means for the work under way. A file caught mid-rotation (unreadable, a certificate
//! without its key yet) fails the reload and keeps the old client; the next call tries again.
//!
//! ```no_run
//! # async fn f() -> Result<(), ocm_runtime::client::follow::FollowError> {
//! use ocm_runtime::client::follow::KubeconfigClient;
//!
//! let hub = KubeconfigClient::load("/managed/hub-kubeconfig/kubeconfig", "my-agent/0.1.0").await?;
//! let mut check = tokio::time::interval(std::time::Duration::from_secs(10));
//! loop {
//!     check.tick().await;
//!     if hub.reload_if_changed().await? {
//!         // hub.client() is the new client from here on.
//!     }
//! }
//! # }
//! ```

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use kube::config::{KubeConfigOptions, Kubeconfig};
use parking_lot::RwLock;
use thiserror::Error;

use super::ClientError;

/// Why a kubeconfig could not be followed.
#[derive(Debug, Error)]
pub enum FollowError {
    #[error("cannot read the hub kubeconfig {path}: {source}")]
    Kubeconfig {
        path: String,
        #[source]
        source: kube::config::KubeconfigError,
    },
    #[error("cannot read {path}, named by the hub kubeconfig: {source}")]
    File {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot build the hub client from {path}: {source}")]
    Client {
        path: String,
        #[source]
        source: ClientError,
    },
}

/// How a [`KubeconfigClient`] makes a client from each version of its kubeconfig: the user
/// agent, the tower layers the owner needs (a clock that reads the responses' `Date`, a rate
/// limit), as [`super::client_with`] does them.
pub type Connect = dyn Fn(kube::Config) -> Result<kube::Client, ClientError> + Send + Sync;

/// A client that follows its kubeconfig (see the module). Clones share it: a reload is seen
/// by every clone.
#[derive(Clone)]
pub struct KubeconfigClient {
    inner: Arc<Inner>,
}

struct Inner {
    /// Empty for a [`KubeconfigClient::fixed`] client: nothing to follow.
    path: PathBuf,
    connect: Option<Box<Connect>>,
    current: RwLock<Loaded>,
}

struct Loaded {
    client: kube::Client,
    /// The apiserver's URL (empty for a [`KubeconfigClient::fixed`] client).
    server: String,
    fingerprint: u64,
    /// Rebuilds so far.
    generation: u64,
}

impl KubeconfigClient {
    /// Reads the kubeconfig at `path` (relative certificate, key and token paths are resolved
    /// against its folder, as kubectl does) and builds a client sending `user_agent`, without a
    /// client-side rate limit ([`super::client_with`]).
    pub async fn load(path: impl Into<PathBuf>, user_agent: &str) -> Result<Self, FollowError> {
        let user_agent = user_agent.to_owned();
        Self::load_with(path, move |config| {
            super::client_with(config, None, &user_agent)
        })
        .await
    }

    /// [`Self::load`], with every client made by `connect` from the kubeconfig's
    /// configuration: at once and at each reload.
    pub async fn load_with(
        path: impl Into<PathBuf>,
        connect: impl Fn(kube::Config) -> Result<kube::Client, ClientError> + Send + Sync + 'static,
    ) -> Result<Self, FollowError> {
        let path = path.into();
        let connect: Box<Connect> = Box::new(connect);
        let (client, server, fingerprint) = build(&path, &connect).await?;
        tracing::info!(kubeconfig = %path.display(), "hub client ready");
        Ok(Self {
            inner: Arc::new(Inner {
                path,
                connect: Some(connect),
                current: RwLock::new(Loaded {
                    client,
                    server,
                    fingerprint,
                    generation: 0,
                }),
            }),
        })
    }

    /// A client from a ready configuration, with no file to follow (a binary that runs with
    /// its own in-cluster identity): [`Self::reload_if_changed`] never changes it.
    pub fn fixed(client: kube::Client) -> Self {
        Self {
            inner: Arc::new(Inner {
                path: PathBuf::new(),
                connect: None,
                current: RwLock::new(Loaded {
                    client,
                    server: String::new(),
                    fingerprint: 0,
                    generation: 0,
                }),
            }),
        }
    }

    /// The current client.
    pub fn client(&self) -> kube::Client {
        self.inner.current.read().client.clone()
    }

    /// The apiserver's URL the kubeconfig names (empty for a [`Self::fixed`] client).
    pub fn server(&self) -> String {
        self.inner.current.read().server.clone()
    }

    /// The kubeconfig followed (`None` for a [`Self::fixed`] client).
    pub fn path(&self) -> Option<&Path> {
        let path = self.inner.path.as_path();
        (!path.as_os_str().is_empty()).then_some(path)
    }

    /// Rebuilds so far (0 until the first).
    pub fn generation(&self) -> u64 {
        self.inner.current.read().generation
    }

    /// Rebuilds the client when the kubeconfig or a file it names changed; `Ok(true)` when it
    /// did. A file caught mid-rotation (unreadable, or a certificate without its key) is an
    /// error and the old client stays: the next check tries again.
    pub async fn reload_if_changed(&self) -> Result<bool, FollowError> {
        let Some(connect) = &self.inner.connect else {
            return Ok(false);
        };
        let path = &self.inner.path;
        let fingerprint = fingerprint(path)?;
        if fingerprint == self.inner.current.read().fingerprint {
            return Ok(false);
        }
        let (client, server, fingerprint) = build(path, connect).await?;
        let mut guard = self.inner.current.write();
        guard.client = client;
        guard.server = server;
        guard.fingerprint = fingerprint;
        guard.generation += 1;
        tracing::info!(
            kubeconfig = %path.display(),
            generation = guard.generation,
            "hub credentials changed: new hub client"
        );
        Ok(true)
    }
}

async fn build(path: &Path, connect: &Connect) -> Result<(kube::Client, String, u64), FollowError> {
    // The fingerprint first: if the files change while we build, the next check sees it.
    let fingerprint = fingerprint(path)?;
    let named = |source| FollowError::Kubeconfig {
        path: path.display().to_string(),
        source,
    };
    let kubeconfig = Kubeconfig::read_from(path).map_err(named)?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(named)?;
    let server = config.cluster_url.to_string();
    let client = connect(config).map_err(|source| FollowError::Client {
        path: path.display().to_string(),
        source,
    })?;
    Ok((client, server, fingerprint))
}

/// A hash of the kubeconfig and of every file it names (certificate authority, client
/// certificate and key, token file), so that a rotation of any of them is seen.
fn fingerprint(path: &Path) -> Result<u64, FollowError> {
    let mut hasher = std::hash::DefaultHasher::new();
    let read = |p: &Path| {
        std::fs::read(p).map_err(|source| FollowError::File {
            path: p.display().to_string(),
            source,
        })
    };
    read(path)?.hash(&mut hasher);
    let kubeconfig = Kubeconfig::read_from(path).map_err(|source| FollowError::Kubeconfig {
        path: path.display().to_string(),
        source,
    })?;
    let mut files: Vec<&str> = Vec::new();
    for cluster in kubeconfig
        .clusters
        .iter()
        .filter_map(|c| c.cluster.as_ref())
    {
        files.extend(cluster.certificate_authority.as_deref());
    }
    for auth in kubeconfig
        .auth_infos
        .iter()
        .filter_map(|a| a.auth_info.as_ref())
    {
        files.extend(auth.client_certificate.as_deref());
        files.extend(auth.client_key.as_deref());
        files.extend(auth.token_file.as_deref());
    }
    for file in files {
        read(Path::new(file))?.hash(&mut hasher);
    }
    Ok(hasher.finish())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// A scratch directory, removed when dropped.
    struct Scratch(PathBuf);

    impl Scratch {
        fn new(name: &str) -> Self {
            let dir = std::env::temp_dir()
                .join(format!("ocm-runtime-follow-{}-{name}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            Self(dir)
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// A kubeconfig naming a token file beside it (relative, resolved against its folder).
    fn kubeconfig(server: &str) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: hub\n  cluster:\n    server: {server}\n\
             users:\n- name: agent\n  user:\n    tokenFile: token\ncontexts:\n- name: hub\n  context:\n    \
             cluster: hub\n    user: agent\ncurrent-context: hub\n"
        )
    }

    #[tokio::test]
    async fn a_change_of_the_file_or_a_named_one_rebuilds_the_client() {
        let dir = Scratch::new("rebuild");
        let path = dir.0.join("kubeconfig");
        std::fs::write(&path, kubeconfig("https://hub-a:6443")).unwrap();
        std::fs::write(dir.0.join("token"), "one").unwrap();
        let hub = KubeconfigClient::load(&path, "test/0").await.unwrap();
        assert_eq!(hub.server(), "https://hub-a:6443/");
        assert_eq!(hub.path(), Some(path.as_path()));
        assert!(!hub.reload_if_changed().await.unwrap(), "nothing changed");
        // The token rotates: same kubeconfig, new client.
        std::fs::write(dir.0.join("token"), "two").unwrap();
        assert!(hub.reload_if_changed().await.unwrap());
        assert_eq!(hub.generation(), 1);
        // The kubeconfig names another server: every clone sees it.
        let clone = hub.clone();
        std::fs::write(&path, kubeconfig("https://hub-b:6443")).unwrap();
        assert!(hub.reload_if_changed().await.unwrap());
        assert_eq!(clone.server(), "https://hub-b:6443/");
        assert_eq!(clone.generation(), 2);
    }

    #[tokio::test]
    async fn a_file_caught_mid_rotation_keeps_the_old_client() {
        let dir = Scratch::new("mid-rotation");
        let path = dir.0.join("kubeconfig");
        std::fs::write(&path, kubeconfig("https://hub:6443")).unwrap();
        std::fs::write(dir.0.join("token"), "one").unwrap();
        let hub = KubeconfigClient::load(&path, "test/0").await.unwrap();
        std::fs::remove_file(dir.0.join("token")).unwrap();
        let e = hub.reload_if_changed().await.unwrap_err();
        assert!(matches!(e, FollowError::File { .. }), "{e}");
        assert!(e.to_string().contains("named by the hub kubeconfig"), "{e}");
        assert_eq!(hub.generation(), 0);
        assert_eq!(hub.server(), "https://hub:6443/");
        std::fs::write(&path, "not: [a kubeconfig").unwrap();
        assert!(matches!(
            hub.reload_if_changed().await,
            Err(FollowError::Kubeconfig { .. })
        ));
        // Back in one piece: the next check rebuilds.
        std::fs::write(&path, kubeconfig("https://hub:6443")).unwrap();
        std::fs::write(dir.0.join("token"), "two").unwrap();
        assert!(hub.reload_if_changed().await.unwrap());
    }

    #[tokio::test]
    async fn the_owner_makes_each_client() {
        let dir = Scratch::new("connect");
        let path = dir.0.join("kubeconfig");
        std::fs::write(&path, kubeconfig("https://hub:6443")).unwrap();
        std::fs::write(dir.0.join("token"), "one").unwrap();
        let made = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = made.clone();
        let hub = KubeconfigClient::load_with(&path, move |config| {
            counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            super::super::client_with(config, None, "test/0")
        })
        .await
        .unwrap();
        std::fs::write(dir.0.join("token"), "two").unwrap();
        assert!(hub.reload_if_changed().await.unwrap());
        assert_eq!(made.load(std::sync::atomic::Ordering::Relaxed), 2);
        // A client the owner cannot make is the reload's error, naming the kubeconfig.
        let refused = KubeconfigClient::load_with(&path, |_| {
            Err(ClientError::UserAgent("bad\nagent".into()))
        })
        .await
        .err()
        .unwrap();
        assert!(matches!(refused, FollowError::Client { .. }), "{refused}");
    }

    #[tokio::test]
    async fn a_fixed_client_follows_nothing() {
        let config = kube::Config::new("https://hub:6443".parse().unwrap());
        let hub = KubeconfigClient::fixed(super::super::client_with(config, None, "t/0").unwrap());
        assert_eq!(hub.path(), None);
        assert_eq!(hub.server(), "");
        assert!(!hub.reload_if_changed().await.unwrap());
    }
}
