//! Publishes the planner's CSR refusals: a log line and a Warning event, once per CSR and
//! reason (the pure parts, which refusals are news and the event, are in
//! `registration::csr`).

use k8s_openapi::api::events::v1::Event;

use crate::manager::registration::csr::{EVENT_NAMESPACE, RefusedCsr, Reported, refusal_event};

/// Logs each refusal and publishes it as an event, once per CSR and reason.
pub struct Reporter {
    events: kube::Api<Event>,
    controller: String,
    /// `reportingInstance`: the pod (or host) name.
    instance: String,
    reported: Reported,
}

impl Reporter {
    pub fn new(client: kube::Client, controller: &str) -> Self {
        let instance = std::env::var("POD_NAME")
            .or_else(|_| std::env::var("HOSTNAME"))
            .unwrap_or_else(|_| controller.to_owned());
        Self {
            events: kube::Api::namespaced(client, EVENT_NAMESPACE),
            controller: controller.to_owned(),
            instance,
            reported: Reported::default(),
        }
    }

    /// CSRs whose refusal is remembered (the `csr_refusals` cache).
    pub fn len(&self) -> usize {
        self.reported.len()
    }

    pub fn is_empty(&self) -> bool {
        self.reported.is_empty()
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
}
