//! CEL cluster selectors (placeholder with the agreed interface; the real module replaces it).

pub struct CelSelector;
pub struct CelCluster;
pub trait ScoreSource {
    fn scores(
        &self,
        cluster: &str,
        resource_name: &str,
    ) -> Option<Vec<ocm_api::AddOnPlacementScoreItem>>;
}
impl CelSelector {
    pub fn compile(_expressions: &[String]) -> Result<CelSelector, String> {
        Err("compilation failed: not yet".into())
    }
    pub fn matches(&self, _cluster: &CelCluster, _scores: &dyn ScoreSource) -> bool {
        false
    }
}
impl CelCluster {
    pub fn new(_cluster: &ocm_api::ManagedCluster) -> CelCluster {
        CelCluster
    }
}
