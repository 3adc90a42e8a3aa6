//! The ScoreDefinitions the add-on manager ships to this agent: the file
//! (`definitions.yaml` of the ConfigMap `<addon>-definitions`, mounted into the pod) read and
//! parsed. The kubelet updates a mounted ConfigMap in place, so the agent reads the file
//! again every check interval instead of restarting.

use std::path::{Path, PathBuf};

use ocm_api::scoring::ShippedDefinition;
use thiserror::Error;

/// Why the file gives no set of definitions (the last good set stays).
#[derive(Debug, Error)]
pub enum FileError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is not a list of {{name, generation, spec}}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("{path}: the definition {name:?} appears twice")]
    Duplicate { path: PathBuf, name: String },
}

/// The file's text: `None` when it does not exist (no definitions shipped, or the ConfigMap
/// not there yet).
pub fn read_text(path: &Path) -> Result<Option<String>, FileError> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(FileError::Read {
            path: path.to_owned(),
            source,
        }),
    }
}

/// The definitions in `text` (the file at `path`), sorted by name. An empty file is an empty
/// list.
pub fn parse(path: &Path, text: &str) -> Result<Vec<ShippedDefinition>, FileError> {
    if text.trim().is_empty() {
        return Ok(Vec::new());
    }
    let mut defs: Vec<ShippedDefinition> =
        serde_saphyr::from_str(text).map_err(|e| FileError::Parse {
            path: path.to_owned(),
            message: e.to_string(),
        })?;
    defs.sort_by(|a, b| a.name.cmp(&b.name));
    if let Some(w) = defs.windows(2).find(|w| w[0].name == w[1].name) {
        return Err(FileError::Duplicate {
            path: path.to_owned(),
            name: w[0].name.clone(),
        });
    }
    Ok(defs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_parses_sorted_and_bad_files_are_errors() {
        let p = Path::new("d.yaml");
        let text = r#"
- name: b
  generation: 2
  spec:
    scoreName: b-score
    evaluator: Agent
    scores:
    - name: x
      expression: up
      normalise: {type: Range, min: "0", max: "1"}
- name: a
  spec:
    scoreName: a-score
    evaluator: Agent
    scores: []
"#;
        let defs = parse(p, text).expect("a list");
        let names: Vec<&str> = defs.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, ["a", "b"]);
        assert_eq!(defs[1].generation, 2);
        assert_eq!(defs[1].spec.scores[0].expression, "up");
        assert!(parse(p, "").expect("empty").is_empty());
        assert!(parse(p, "[]").expect("empty list").is_empty());
        assert!(matches!(
            parse(p, "name: not-a-list"),
            Err(FileError::Parse { .. })
        ));
        let twice = "- {name: a, spec: {scoreName: s, scores: []}}\n- {name: a, spec: {scoreName: t, scores: []}}\n";
        assert!(matches!(parse(p, twice), Err(FileError::Duplicate { .. })));
        assert!(
            read_text(Path::new("/nonexistent/definitions.yaml"))
                .expect("missing is no error")
                .is_none()
        );
    }
}
