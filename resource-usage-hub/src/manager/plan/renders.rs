//! Renderings (and parsed CSR requests) kept between passes.

use super::*;

/// Renderings kept between passes: rendering parses the agent's YAML templates, and a pass
/// over a settled fleet needs each cluster's rendering only to compare hashes. Keyed by the
/// cluster and the config's spec, for one template; what a pass did not use is dropped.
/// Also the CSR requests parsed (by uid and resourceVersion), dropped the same way.
#[derive(Debug, Default)]
pub struct Renders {
    template: Option<AgentTemplate>,
    previous: HashMap<(String, String), Result<Arc<Rendered>, String>>,
    current: HashMap<(String, String), Result<Arc<Rendered>, String>>,
    pub(super) requests: crate::manager::registration::csr::Requests,
}

impl Renders {
    pub(super) fn get(
        &mut self,
        t: &AgentTemplate,
        cluster: &str,
        adc: Option<&AddOnDeploymentConfigSpec>,
    ) -> Result<Arc<Rendered>, String> {
        if self.template.as_ref() != Some(t) {
            self.template = Some(t.clone());
            self.previous.clear();
            self.current.clear();
        }
        let config = adc
            .map(|a| serde_json::to_string(a).unwrap_or_default())
            .unwrap_or_default();
        let key = (cluster.to_owned(), config);
        if let Some(r) = self.current.get(&key) {
            return r.clone();
        }
        let r = match self.previous.remove(&key) {
            Some(r) => r,
            // Kept without the spec (most of a rendering's memory); a write renders again.
            None => render::render(t, cluster, adc)
                .map(|mut r| {
                    r.spec = ManifestWorkSpec::default();
                    Arc::new(r)
                })
                .map_err(|e| e.to_string()),
        };
        self.current.insert(key, r.clone());
        r
    }

    /// Ends a pass: what it did not use goes.
    pub(super) fn rotate(&mut self) {
        self.previous = std::mem::take(&mut self.current);
        self.requests.rotate();
    }

    /// Entries kept: (renderings, parsed CSR requests).
    pub fn sizes(&self) -> (usize, usize) {
        (
            self.previous.len() + self.current.len(),
            self.requests.len(),
        )
    }
}
