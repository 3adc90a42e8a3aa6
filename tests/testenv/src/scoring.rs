//! ScoreDefinitions for tests: the chart's built-in resource-usage definition filled with a
//! test's values (the same file and placeholders the chart fills), and applying one.

use kube::api::{ApiResource, DynamicObject, Patch, PatchParams};
use kube::{Api, Client};
use serde_json::Value;

use crate::{Error, paths};

/// The built-in definition's values (the chart's `scorer.*`).
#[derive(Clone, Debug)]
pub struct Builtin {
    /// The ScoreDefinition's name.
    pub name: String,
    pub score_name: String,
    pub refresh_period: String,
    pub window: String,
    pub step: String,
    pub max_data_age: String,
    /// `Some((cpu, memory))` maxima (quantities) for Range; `None` for MinMax.
    pub range: Option<(String, String)>,
    /// Labels of the object (a test's scorer selects its own with `--definition-selector`).
    pub labels: Vec<(String, String)>,
}

/// The chart's built-in definition filled with `b`, as JSON.
pub fn builtin(b: &Builtin) -> Result<Value, Error> {
    let path = paths::builtin_definition();
    let text =
        std::fs::read_to_string(&path).map_err(Error::io(format!("read {}", path.display())))?;
    let norm = |max: Option<&String>| match max {
        Some(m) => format!("{{type: Range, min: \"0\", max: \"{m}\"}}"),
        None => "{type: MinMax}".to_owned(),
    };
    let filled = text
        .replace("{{NAME}}", &b.name)
        .replace("{{SCORE_NAME}}", &b.score_name)
        .replace("{{REFRESH_PERIOD}}", &b.refresh_period)
        .replace("{{WINDOW}}", &b.window)
        .replace("{{STEP}}", &b.step)
        .replace("{{MAX_DATA_AGE}}", &b.max_data_age)
        .replace("{{CPU_NORMALISE}}", &norm(b.range.as_ref().map(|r| &r.0)))
        .replace(
            "{{MEMORY_NORMALISE}}",
            &norm(b.range.as_ref().map(|r| &r.1)),
        );
    let mut v: Value = serde_saphyr::from_str(&filled).map_err(|e| Error::Parse {
        file: path.display().to_string(),
        message: e.to_string(),
    })?;
    let labels: serde_json::Map<String, Value> = b
        .labels
        .iter()
        .map(|(k, val)| (k.clone(), Value::String(val.clone())))
        .collect();
    v["metadata"]["labels"] = Value::Object(labels);
    Ok(v)
}

fn resource() -> ApiResource {
    ApiResource {
        group: "scoring.ocm-placement.io".into(),
        version: "v1alpha1".into(),
        api_version: "scoring.ocm-placement.io/v1alpha1".into(),
        kind: "ScoreDefinition".into(),
        plural: "scoredefinitions".into(),
    }
}

/// Creates or updates the ScoreDefinition `def` (server-side apply as `testenv`).
pub async fn apply(client: &Client, def: &Value) -> Result<(), Error> {
    let name = def["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource());
    api.patch(
        &name,
        &PatchParams::apply("testenv").force(),
        &Patch::Apply(def),
    )
    .await?;
    Ok(())
}

/// Deletes the ScoreDefinition `name`.
pub async fn delete(client: &Client, name: &str) -> Result<(), Error> {
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource());
    api.delete(name, &Default::default()).await?;
    Ok(())
}
