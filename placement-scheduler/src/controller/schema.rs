//! What the hub's CRDs can hold, read once at start from the apiserver's published OpenAPI
//! (`/openapi/v3/...`, which every authenticated user may read: no permission beyond
//! upstream's ClusterRole).

use std::time::Duration;

use kube::Client;
use placement_core::ScoreFields;
use serde_json::Value;

/// The group-version document that describes PlacementDecisions.
const DOCUMENT: &str = "/openapi/v3/apis/cluster.open-cluster-management.io/v1beta1";
const TIMEOUT: Duration = Duration::from_secs(10);

/// Sets `handle`'s [`ScoreFields`] from the hub's published OpenAPI: whether its
/// PlacementDecision CRD has `decisions[].score` (OCM 1.3; OCM 1.2's has not, nor the
/// Placement's `lastScoreUpdateTime`). Until the document says (the apiserver publishes a new
/// CRD's schema a few seconds after it is created), the fields are assumed
/// ([`ScoreFields::Stored`], what this version's CRDs have): the first read is awaited, later
/// ones run in the background, every [`RETRY`] for at most [`RETRIES`] times.
pub(crate) async fn learn_score_fields(client: &Client, handle: &super::Handle) {
    match read(client).await {
        Ok(fields) => set(handle, fields),
        Err(first) => {
            tracing::info!(document = DOCUMENT, reason = %first, "the hub's OpenAPI does not say yet whether PlacementDecisions have decisions[].score; assuming they do, and asking again");
            let (client, handle) = (client.clone(), handle.clone());
            tokio::spawn(async move {
                for _ in 0..RETRIES {
                    tokio::time::sleep(RETRY).await;
                    if let Ok(fields) = read(&client).await {
                        set(&handle, fields);
                        return;
                    }
                }
                tracing::warn!(
                    document = DOCUMENT,
                    "the hub's OpenAPI never described PlacementDecision; assuming decisions[].score exists"
                );
            });
        }
    }
}

fn set(handle: &super::Handle, fields: ScoreFields) {
    if fields == ScoreFields::Absent {
        tracing::info!(
            "the hub's PlacementDecision CRD has no decisions[].score (OCM 1.2): scores and lastScoreUpdateTime are not written"
        );
    }
    handle.state.write().snapshot.set_score_fields(fields);
}

const RETRY: Duration = Duration::from_secs(2);
const RETRIES: u32 = 60;

/// One read of the document.
async fn read(client: &Client) -> Result<ScoreFields, String> {
    let request = http::Request::get(DOCUMENT)
        .body(Vec::new())
        .map_err(|e| e.to_string())?;
    let text = tokio::time::timeout(TIMEOUT, client.request_text(request))
        .await
        .map_err(|_| format!("no answer within {TIMEOUT:?}"))?
        .map_err(|e| e.to_string())?;
    let doc: Value = serde_json::from_str(&text).map_err(|e| format!("not JSON: {e}"))?;
    from_document(&doc).ok_or_else(|| "no PlacementDecision schema in it".to_owned())
}

/// The answer of an OpenAPI v3 document: `None` when it has no PlacementDecision schema with
/// a decisions list.
pub fn from_document(doc: &Value) -> Option<ScoreFields> {
    let schemas = doc.pointer("/components/schemas")?.as_object()?;
    let (_, schema) = schemas
        .iter()
        .find(|(name, _)| name.ends_with(".v1beta1.PlacementDecision"))?;
    let entry = schema.pointer("/properties/status/properties/decisions/items/properties")?;
    Some(if entry.get("score").is_some() {
        ScoreFields::Stored
    } else {
        ScoreFields::Absent
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn doc(entry: Value) -> Value {
        json!({"components": {"schemas": {
            "io.open-cluster-management.cluster.v1beta1.Placement": {"type": "object"},
            "io.open-cluster-management.cluster.v1beta1.PlacementDecision": {"properties": {"status": {"properties": {
                "decisions": {"type": "array", "items": {"properties": entry}}}}}}}}})
    }

    #[test]
    fn the_document_says_whether_decisions_have_a_score() {
        let v13 = doc(json!({"clusterName": {}, "reason": {}, "score": {}}));
        let v12 = doc(json!({"clusterName": {}, "reason": {}}));
        assert_eq!(from_document(&v13), Some(ScoreFields::Stored));
        assert_eq!(from_document(&v12), Some(ScoreFields::Absent));
        assert_eq!(from_document(&json!({})), None);
        assert_eq!(from_document(&json!({"components": {"schemas": {}}})), None);
        assert_eq!(
            from_document(&json!({"components": {"schemas": {
            "io.open-cluster-management.cluster.v1beta1.PlacementDecision": {"type": "object"}}}})),
            None
        );
    }
}
