//! Publishes the planner's refusals: a log line and a Warning event, once per CSR and reason,
//! and once per add-on and refused config reference (the pure parts, which refusals are news
//! and the events, are in `registration::csr` and `plan`).

use ocm_runtime::events::Reporting;
use prometheus_client::metrics::counter::Counter;

use crate::manager::plan::{RefusedConfig, ReportedConfigs, config_refusal_occurrence};
use crate::manager::registration::csr::{RefusedCsr, Reported, refusal_occurrence};

/// Logs each refusal and publishes it as an event, once per CSR and reason, and once per
/// add-on and refused config reference.
pub struct Reporter {
    client: kube::Client,
    /// `reportingController` and `reportingInstance` (the pod or host name).
    reporting: Reporting,
    reported: Reported,
    reported_configs: ReportedConfigs,
}

impl Reporter {
    pub fn new(client: kube::Client, controller: &str) -> Self {
        Self {
            client,
            reporting: Reporting::new(controller),
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
            let occurrence = refusal_occurrence(r, jiff::Timestamp::now());
            if let Err(e) = self.reporting.publish(&self.client, &occurrence).await {
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
            let occurrence = config_refusal_occurrence(r, jiff::Timestamp::now());
            if let Err(e) = self.reporting.publish(&self.client, &occurrence).await {
                tracing::warn!(cluster = %r.cluster, error = %e, "publishing the refusal event failed");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ObjectReference;
    use k8s_openapi::api::events::v1::Event;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};

    use super::*;
    use crate::manager::registration::CsrRefusal;

    /// The event the manager published before it went through `ocm_runtime::events`, field by
    /// field: readers (alerts, `kubectl get events` filters) keep finding the same objects.
    #[test]
    fn a_csr_refusal_is_the_same_event_object() {
        let r = RefusedCsr {
            name: "csr-a".into(),
            uid: "uid-a".into(),
            refusal: CsrRefusal::Labels,
        };
        let now = jiff::Timestamp::from_second(1_800_000_000).expect("a valid time");
        let reporting = Reporting::with_instance("resource-usage-hub", "pod-1");
        let occurrence = refusal_occurrence(&r, now);
        let name = reporting.event_name(&occurrence.regarding, now.as_nanosecond());
        let event = reporting.event(&occurrence, name, None);
        let expected = Event {
            metadata: ObjectMeta {
                name: Some(format!("csr-a.{:x}", now.as_nanosecond())),
                namespace: Some("default".to_owned()),
                ..ObjectMeta::default()
            },
            event_time: Some(MicroTime(now)),
            type_: Some("Warning".to_owned()),
            reason: Some("MissingLabels".to_owned()),
            action: Some("NotApproved".to_owned()),
            note: Some(format!("not approved: {}", CsrRefusal::Labels)),
            regarding: Some(ObjectReference {
                api_version: Some("certificates.k8s.io/v1".to_owned()),
                kind: Some("CertificateSigningRequest".to_owned()),
                name: Some("csr-a".to_owned()),
                uid: Some("uid-a".to_owned()),
                ..ObjectReference::default()
            }),
            reporting_controller: Some("resource-usage-hub".to_owned()),
            reporting_instance: Some("pod-1".to_owned()),
            ..Event::default()
        };
        assert_eq!(event, expected);
        assert!(event.related.is_none() && event.series.is_none());
    }
}
