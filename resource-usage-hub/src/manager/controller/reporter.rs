//! Publishes the planner's refusals: a log line and a Warning event, once per CSR and reason,
//! and once per add-on and refused config reference (the pure parts, which refusals are news
//! and the events, are in `registration::csr` and `plan`).

use k8s_openapi::api::events::v1::Event;
use prometheus_client::metrics::counter::Counter;

use crate::manager::plan::{RefusedConfig, ReportedConfigs, config_refusal_event};
use crate::manager::registration::csr::{EVENT_NAMESPACE, RefusedCsr, Reported, refusal_event};

/// Logs each refusal and publishes it as an event, once per CSR and reason, and once per
/// add-on and refused config reference.
pub struct Reporter {
    client: kube::Client,
    events: kube::Api<Event>,
    controller: String,
    /// `reportingInstance`: the pod (or host) name.
    instance: String,
    reported: Reported,
    reported_configs: ReportedConfigs,
}

impl Reporter {
    pub fn new(client: kube::Client, controller: &str) -> Self {
        let instance = std::env::var("POD_NAME")
            .or_else(|_| std::env::var("HOSTNAME"))
            .unwrap_or_else(|_| controller.to_owned());
        Self {
            events: kube::Api::namespaced(client.clone(), EVENT_NAMESPACE),
            client,
            controller: controller.to_owned(),
            instance,
            reported: Reported::default(),
            reported_configs: ReportedConfigs::default(),
        }
    }

    /// CSRs whose refusal is remembered (the `csr_refusals` cache).
    pub fn len(&self) -> usize {
        self.reported.len()
    }

    pub fn is_empty(&self) -> bool {
        self.reported.is_empty()
    }

    /// Add-ons whose refused config reference is remembered (the `config_refusals` cache).
    pub fn configs_len(&self) -> usize {
        self.reported_configs.len()
    }

    /// Reports the refusals of one pass that were not reported yet. An event that cannot be
    /// published is logged; it is not retried (the refusal's log line stands).
    pub async fn report(&mut self, refused: &[RefusedCsr]) {
        for r in self.reported.fresh(refused) {
            tracing::warn!(
                csr = %r.name,
                reason = r.refusal.reason(),
                "not approving the add-on's certificate request: {}",
                r.refusal
            );
            let event = refusal_event(r, &self.controller, &self.instance, jiff::Timestamp::now());
            if let Err(e) = self
                .events
                .create(&kube::api::PostParams::default(), &event)
                .await
            {
                tracing::warn!(csr = %r.name, error = %e, "publishing the refusal event failed");
            }
        }
    }

    /// Reports the config references of one pass refused and not reported yet: a log line, a
    /// Warning event regarding the add-on (not retried when it cannot be published) and
    /// `counter`.
    pub async fn report_configs(&mut self, refused: &[RefusedConfig], counter: &Counter) {
        for r in self.reported_configs.fresh(refused) {
            counter.inc();
            tracing::warn!(
                cluster = %r.cluster,
                addon = %r.addon,
                reason = r.refusal.reason(),
                "not deploying the config the add-on's status names: {}",
                r.refusal
            );
            let event =
                config_refusal_event(r, &self.controller, &self.instance, jiff::Timestamp::now());
            let events: kube::Api<Event> = kube::Api::namespaced(self.client.clone(), &r.cluster);
            if let Err(e) = events
                .create(&kube::api::PostParams::default(), &event)
                .await
            {
                tracing::warn!(cluster = %r.cluster, error = %e, "publishing the refusal event failed");
            }
        }
    }
}
