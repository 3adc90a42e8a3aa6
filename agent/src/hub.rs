//! The hub client, built from a kubeconfig file and rebuilt when that file or the files it
//! names change: OCM's registration agent rotates the add-on's client certificate in the
//! mounted `<addon>-hub-kubeconfig` secret before it expires, and the agent must go on with
//! the new one without a restart.

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use kube::config::{KubeConfigOptions, Kubeconfig};
use thiserror::Error;

#[derive(Debug, Error)]
pub enum HubError {
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
        source: ocm_runtime::client::ClientError,
    },
}

/// A hub client that follows its kubeconfig. Clones share it.
#[derive(Clone)]
pub struct HubClient {
    inner: Arc<Inner>,
}

struct Inner {
    path: PathBuf,
    user_agent: String,
    current: RwLock<Loaded>,
}

struct Loaded {
    client: kube::Client,
    fingerprint: u64,
    /// Rebuilds so far.
    generation: u64,
}

impl HubClient {
    /// Reads `path` (relative certificate, key and token paths are resolved against its
    /// folder, as kubectl does) and builds the client.
    pub async fn load(path: impl Into<PathBuf>, user_agent: &str) -> Result<Self, HubError> {
        let path = path.into();
        let (client, fingerprint) = build(&path, user_agent).await?;
        tracing::info!(kubeconfig = %path.display(), "hub client ready");
        Ok(Self {
            inner: Arc::new(Inner {
                path,
                user_agent: user_agent.to_owned(),
                current: RwLock::new(Loaded {
                    client,
                    fingerprint,
                    generation: 0,
                }),
            }),
        })
    }

    /// A client from a ready configuration (no file to follow): for providers that run with
    /// the hub's own in-cluster identity.
    pub fn fixed(client: kube::Client) -> Self {
        Self {
            inner: Arc::new(Inner {
                path: PathBuf::new(),
                user_agent: String::new(),
                current: RwLock::new(Loaded {
                    client,
                    fingerprint: 0,
                    generation: 0,
                }),
            }),
        }
    }

    /// The current client.
    pub fn client(&self) -> kube::Client {
        self.read(|l| l.client.clone())
    }

    fn read<T>(&self, f: impl FnOnce(&Loaded) -> T) -> T {
        // A poisoned lock still holds a whole client: the writer only swaps complete values.
        let guard = self.inner.current.read().unwrap_or_else(|e| e.into_inner());
        f(&guard)
    }

    /// Rebuilds the client when the kubeconfig or a file it names changed; `Ok(true)` when it
    /// did. A file caught mid-rotation (unreadable, or a certificate without its key) is an
    /// error and the old client stays: the next check tries again.
    pub async fn reload_if_changed(&self) -> Result<bool, HubError> {
        if self.inner.path.as_os_str().is_empty() {
            return Ok(false);
        }
        let fingerprint = fingerprint(&self.inner.path)?;
        if fingerprint == self.read(|l| l.fingerprint) {
            return Ok(false);
        }
        let (client, fingerprint) = build(&self.inner.path, &self.inner.user_agent).await?;
        let mut guard = self
            .inner
            .current
            .write()
            .unwrap_or_else(|e| e.into_inner());
        guard.client = client;
        guard.fingerprint = fingerprint;
        guard.generation += 1;
        tracing::info!(
            kubeconfig = %self.inner.path.display(),
            generation = guard.generation,
            "hub credentials changed: new hub client"
        );
        Ok(true)
    }
}

async fn build(path: &Path, user_agent: &str) -> Result<(kube::Client, u64), HubError> {
    // The fingerprint first: if the files change while we build, the next check sees it.
    let fingerprint = fingerprint(path)?;
    let named = |source| HubError::Kubeconfig {
        path: path.display().to_string(),
        source,
    };
    let kubeconfig = Kubeconfig::read_from(path).map_err(named)?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(named)?;
    let client = ocm_runtime::client::client_with(config, None, user_agent).map_err(|source| {
        HubError::Client {
            path: path.display().to_string(),
            source,
        }
    })?;
    Ok((client, fingerprint))
}

/// A hash of the kubeconfig and of every file it names (certificate authority, client
/// certificate and key, token file), so that a rotation of any of them is seen.
fn fingerprint(path: &Path) -> Result<u64, HubError> {
    let mut hasher = std::hash::DefaultHasher::new();
    let read = |p: &Path| {
        std::fs::read(p).map_err(|source| HubError::File {
            path: p.display().to_string(),
            source,
        })
    };
    read(path)?.hash(&mut hasher);
    let kubeconfig = Kubeconfig::read_from(path).map_err(|source| HubError::Kubeconfig {
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
