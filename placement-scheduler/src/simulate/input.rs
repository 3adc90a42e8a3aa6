//! Reading hub objects from YAML files: multi-document files and `kind: List`, as
//! `kubectl get -o yaml` exports them (or `-o json`: JSON is YAML too). A `null` field is
//! unset, as Go reads it. Every error names the file and the object.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use ocm_api::scoring::ScoreDefinition;
use ocm_api::{
    AddOnPlacementScore, ManagedCluster, ManagedClusterSet, ManagedClusterSetBinding, Placement,
    PlacementDecision,
};
use serde::de::DeserializeOwned;
use serde_json::Value;
use thiserror::Error;

use placement_core::Snapshot;

#[derive(Debug, Error)]
pub enum InputError {
    #[error("{path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: document {doc}: not valid YAML: {message}")]
    Yaml {
        path: String,
        doc: usize,
        message: String,
    },
    #[error("{path}: {object}: {message}")]
    Object {
        path: String,
        object: String,
        message: String,
    },
    #[error("{path}: no YAML files in this directory")]
    EmptyDir { path: String },
}

/// One file's text and the name to report it by.
pub struct Source {
    pub name: String,
    pub text: String,
}

/// The example fleet shipped in `examples/fleet`, built into the binary.
pub fn embedded_fleet() -> Vec<Source> {
    let file = |name: &str, text: &str| Source {
        name: format!("examples/fleet/{name} (built in)"),
        text: text.to_owned(),
    };
    vec![
        file(
            "clusters.yaml",
            include_str!("../../../examples/fleet/clusters.yaml"),
        ),
        file(
            "clustersets.yaml",
            include_str!("../../../examples/fleet/clustersets.yaml"),
        ),
        file(
            "placements.yaml",
            include_str!("../../../examples/fleet/placements.yaml"),
        ),
        file(
            "scores.yaml",
            include_str!("../../../examples/fleet/scores.yaml"),
        ),
    ]
}

/// Reads a file, or a directory's `*.yaml`/`*.yml` files in name order.
pub fn read_path(path: &Path) -> Result<Vec<Source>, InputError> {
    let shown = path.display().to_string();
    let read = |p: &Path| {
        std::fs::read_to_string(p).map_err(|source| InputError::Read {
            path: p.display().to_string(),
            source,
        })
    };
    if path.is_dir() {
        let entries = std::fs::read_dir(path).map_err(|source| InputError::Read {
            path: shown.clone(),
            source,
        })?;
        let mut files: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "yaml" || e == "yml"))
            .collect();
        files.sort();
        if files.is_empty() {
            return Err(InputError::EmptyDir { path: shown });
        }
        files
            .iter()
            .map(|p| {
                Ok(Source {
                    name: p.display().to_string(),
                    text: read(p)?,
                })
            })
            .collect()
    } else {
        Ok(vec![Source {
            name: shown,
            text: read(path)?,
        }])
    }
}

/// The objects read, keyed by (kind, namespace, name): a later one replaces an earlier one.
#[derive(Default)]
pub struct Objects {
    pub clusters: BTreeMap<String, ManagedCluster>,
    pub sets: BTreeMap<String, ManagedClusterSet>,
    pub bindings: BTreeMap<(String, String), ManagedClusterSetBinding>,
    pub scores: BTreeMap<(String, String), AddOnPlacementScore>,
    pub decisions: BTreeMap<(String, String), PlacementDecision>,
    /// Each Placement with the file it came from.
    pub placements: BTreeMap<(String, String), (Placement, String)>,
    /// ScoreDefinitions: documentation of where scores come from, never scheduled by.
    pub definitions: BTreeMap<String, ScoreDefinition>,
}

impl Objects {
    /// The ScoreDefinition that fills the AddOnPlacementScore `resource` (the oldest, as the
    /// scorer admits them), by name.
    pub fn definition_filling(&self, resource: &str) -> Option<String> {
        self.definitions
            .values()
            .filter(|d| d.spec.score_name == resource && d.metadata.deletion_timestamp.is_none())
            .min_by_key(|d| {
                (
                    d.metadata.creation_timestamp.as_ref().map(|t| t.0),
                    d.metadata.name.clone(),
                )
            })
            .and_then(|d| d.metadata.name.clone())
    }

    pub fn load(sources: &[Source]) -> Result<Self, InputError> {
        let mut objects = Objects::default();
        for source in sources {
            objects.add_source(source)?;
        }
        Ok(objects)
    }

    fn add_source(&mut self, source: &Source) -> Result<(), InputError> {
        let docs: Vec<Value> =
            serde_saphyr::from_multiple(&source.text).map_err(|e| InputError::Yaml {
                path: source.name.clone(),
                doc: 0,
                message: e.to_string(),
            })?;
        for (i, doc) in docs.into_iter().enumerate() {
            if doc.is_null() {
                continue;
            }
            if doc.get("kind").and_then(Value::as_str) == Some("List") {
                // Go writes an empty List's items as `null`.
                let items = doc
                    .get("items")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                for item in items {
                    self.add_object(&source.name, i + 1, item)?;
                }
            } else {
                self.add_object(&source.name, i + 1, doc)?;
            }
        }
        Ok(())
    }

    fn add_object(&mut self, path: &str, doc: usize, v: Value) -> Result<(), InputError> {
        let header = Header::of(path, doc, &v)?;
        let bad = |message: String| header.bad(message);
        let (name, namespace) = (header.name.clone(), header.namespace.clone());
        fn decode<T: DeserializeOwned>(v: Value) -> Result<T, String> {
            serde_json::from_value(v).map_err(|e| e.to_string())
        }
        let namespaced = |ns: &str| {
            if ns.is_empty() {
                "default".to_owned()
            } else {
                ns.to_owned()
            }
        };
        match header.kind.as_str() {
            "ManagedCluster" => {
                self.clusters.insert(name, decode(v).map_err(bad)?);
            }
            "ManagedClusterSet" => {
                self.sets.insert(name, decode(v).map_err(bad)?);
            }
            "ManagedClusterSetBinding" => {
                let mut b: ManagedClusterSetBinding = decode(v).map_err(bad)?;
                b.metadata.namespace = Some(namespaced(&namespace));
                self.bindings.insert((namespaced(&namespace), name), b);
            }
            "AddOnPlacementScore" => {
                if namespace.is_empty() {
                    return Err(bad("an AddOnPlacementScore lives in its cluster's namespace: metadata.namespace is required".into()));
                }
                self.scores
                    .insert((namespace, name), decode(v).map_err(bad)?);
            }
            "PlacementDecision" => {
                let mut d: PlacementDecision = decode(v).map_err(bad)?;
                d.metadata.namespace = Some(namespaced(&namespace));
                self.decisions.insert((namespaced(&namespace), name), d);
            }
            "Placement" => {
                let mut p: Placement = decode(v).map_err(bad)?;
                p.metadata.namespace = Some(namespaced(&namespace));
                self.placements
                    .insert((namespaced(&namespace), name), (p, path.to_owned()));
            }
            "ScoreDefinition" => {
                self.definitions.insert(name, decode(v).map_err(bad)?);
            }
            other => return Err(bad(format!("unknown kind {other:?}"))),
        }
        Ok(())
    }

    /// Checks that each Placement refers to things that exist in the input.
    pub fn check_references(&self) -> Result<(), InputError> {
        for ((ns, name), (p, path)) in &self.placements {
            for set in &p.spec.cluster_sets {
                if !self.sets.contains_key(set) {
                    return Err(InputError::Object {
                        path: path.clone(),
                        object: format!("Placement {ns}/{name}"),
                        message: format!(
                            "spec.clusterSets names ManagedClusterSet {set:?}, which no file holds"
                        ),
                    });
                }
            }
        }
        Ok(())
    }

    pub fn snapshot(&self) -> Snapshot {
        let mut s = Snapshot::new();
        for c in self.clusters.values() {
            s.upsert_cluster(Arc::new(c.clone()));
        }
        for set in self.sets.values() {
            s.upsert_set(Arc::new(set.clone()));
        }
        for b in self.bindings.values() {
            s.upsert_binding(b);
        }
        for sc in self.scores.values() {
            s.upsert_score(Arc::new(sc.clone()));
        }
        for d in self.decisions.values() {
            s.upsert_decision(Arc::new(d.clone()));
        }
        s
    }
}

/// What a document says it is, checked before it is decoded: a name, and the group simulate
/// reads.
struct Header {
    kind: String,
    name: String,
    namespace: String,
    path: String,
    /// How errors name the object: `document <n>: <kind> [<namespace>/]<name>`.
    object: String,
}

impl Header {
    fn of(path: &str, doc: usize, v: &Value) -> Result<Self, InputError> {
        let text = |k: &str| {
            v.get(k)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        let meta = |k: &str| {
            v.get("metadata")
                .and_then(|m| m.get(k))
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        let (api_version, kind, name) = (text("apiVersion"), text("kind"), meta("name"));
        let namespace = meta("namespace");
        let object = if namespace.is_empty() {
            format!("document {doc}: {kind} {name}")
        } else {
            format!("document {doc}: {kind} {namespace}/{name}")
        };
        let header = Self {
            kind,
            name,
            namespace,
            path: path.to_owned(),
            object,
        };
        if header.name.is_empty() {
            return Err(header.bad("metadata.name is required".into()));
        }
        let group = api_version.split('/').next().unwrap_or_default();
        let ours = group == ocm_api::scoring::GROUP && header.kind == "ScoreDefinition";
        if group != ocm_api::wellknown::group::CLUSTER && !ours {
            return Err(header.bad(format!(
                "unsupported apiVersion {api_version:?}: simulate reads ManagedCluster, ManagedClusterSet, \
                 ManagedClusterSetBinding, Placement, PlacementDecision and AddOnPlacementScore \
                 (group {}), and ScoreDefinition ({}) as where scores come from",
                ocm_api::wellknown::group::CLUSTER,
                ocm_api::scoring::GROUP
            )));
        }
        Ok(header)
    }

    fn bad(&self, message: String) -> InputError {
        InputError::Object {
            path: self.path.clone(),
            object: self.object.clone(),
            message,
        }
    }
}
