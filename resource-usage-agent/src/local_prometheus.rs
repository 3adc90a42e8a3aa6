//! The managed cluster's own Prometheus (any Prometheus-compatible query API), which the
//! agent evaluates the shipped ScoreDefinitions against: its flags, the one client every
//! definition shares, and the evaluator's caps on definitions' limits.

use std::path::PathBuf;
use std::time::Duration;

use ocm_runtime::flags::parse_duration;
use score_provider::definition::Caps;
use score_provider::prom::{PromClient, PromError, PromSettings};

/// Flags of the definitions' query API and limits.
#[derive(clap::Args, Clone, Debug)]
pub struct PrometheusArgs {
    /// The managed cluster's Prometheus query API, e.g.
    /// `http://prometheus-k8s.monitoring.svc:9090`. Set it through the AddOnDeploymentConfig's
    /// customizedVariables (`PROMETHEUS_URL`). Without it, definitions evaluated by the agent
    /// report `NoPrometheus`.
    #[arg(long, env = "PROMETHEUS_URL")]
    pub prometheus_url: Option<String>,
    /// A file holding a bearer token for the query API, read for every query.
    #[arg(long, env = "PROMETHEUS_TOKEN_FILE")]
    pub prometheus_token_file: Option<PathBuf>,
    /// A PEM CA bundle for the query API instead of the system's roots.
    #[arg(long, env = "PROMETHEUS_CA_FILE")]
    pub prometheus_ca_file: Option<PathBuf>,
    /// The longest one query attempt may take.
    #[arg(long, env = "PROMETHEUS_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub prometheus_timeout: Duration,
    /// The most series one query of a definition may answer (a definition may ask for less).
    #[arg(long, env = "DEFINITION_MAX_SERIES", default_value_t = 1000)]
    pub definition_max_series: usize,
    /// The longest a definition's queries may take together (a definition may ask for less).
    #[arg(long, env = "DEFINITION_QUERY_TIMEOUT", default_value = "30s", value_parser = parse_duration)]
    pub definition_query_timeout: Duration,
    /// The shortest refresh period taken: a definition asking for less runs this often.
    #[arg(long, env = "DEFINITION_MIN_PERIOD", default_value = "10s", value_parser = parse_duration)]
    pub definition_min_period: Duration,
}

/// The largest answer read from the query API: one cluster's series are few.
const MAX_RESPONSE_BYTES: usize = 16 * 1024 * 1024;

impl PrometheusArgs {
    /// The query client, `None` without a URL (an empty one counts as none: an unset
    /// customized variable).
    pub fn client(&self) -> Result<Option<PromClient>, PromError> {
        let Some(url) = self
            .prometheus_url
            .as_deref()
            .map(str::trim)
            .filter(|u| !u.is_empty())
        else {
            return Ok(None);
        };
        PromClient::new(PromSettings {
            url: url.to_owned(),
            bearer_token: None,
            bearer_token_file: self.prometheus_token_file.clone(),
            ca_file: self.prometheus_ca_file.clone(),
            headers: Vec::new(),
            timeout: self.prometheus_timeout,
            attempts: 2,
            thanos: None,
            max_response_bytes: MAX_RESPONSE_BYTES,
        })
        .map(Some)
    }

    /// The caps definitions are compiled with.
    pub fn caps(&self) -> Caps {
        Caps {
            max_series: self.definition_max_series.max(1),
            query_timeout: self.definition_query_timeout,
            min_period: self.definition_min_period,
            ..Caps::default()
        }
    }
}
