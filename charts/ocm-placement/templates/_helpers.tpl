{{/* Names, labels and images shared by the templates. */}}

{{- define "ocm-placement.labels" -}}
app.kubernetes.io/part-of: ocm-placement
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end }}

{{- define "ocm-placement.tag" -}}
{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/* An image: (list $ "<name>") -> <registry>/<name>:<tag>, the names images/build.sh tags
     (tests/e2e/tests/images.rs checks they agree). */}}
{{- define "ocm-placement.image" -}}
{{- $root := index . 0 -}}
{{ printf "%s/%s:%s" $root.Values.image.registry (index . 1) (include "ocm-placement.tag" $root) }}
{{- end }}

{{/* The flags every binary shares: logging, client, leader election, metrics. */}}
{{- define "ocm-placement.commonArgs" -}}
- --log-format={{ .Values.logFormat }}
- --metrics-bind-address=0.0.0.0:8080
- --client-qps={{ .Values.client.qps }}
- --client-burst={{ int64 .Values.client.burst }}
- --leader-elect={{ .Values.leaderElection.enabled }}
- --leader-election-lease-duration={{ .Values.leaderElection.leaseDuration }}
- --leader-election-renew-deadline={{ .Values.leaderElection.renewDeadline }}
- --leader-election-retry-period={{ .Values.leaderElection.retryPeriod }}
{{- end }}

{{/* The pod's security: a fixed non-root user (images may run as root or a named user). */}}
{{- define "ocm-placement.podSecurity" -}}
securityContext:
  runAsNonRoot: true
  runAsUser: 65532
  runAsGroup: 65532
  seccompProfile: {type: RuntimeDefault}
{{- end }}

{{/* One replica unless leader election is on: two active replicas would both write. */}}
{{- define "ocm-placement.replicas" -}}
{{- $replicas := int (index . 1) -}}
{{- if and (gt $replicas 1) (not (index . 0).Values.leaderElection.enabled) -}}
{{- fail (printf "%s: %d replicas need leaderElection.enabled" (index . 2) $replicas) -}}
{{- end -}}
{{ $replicas }}
{{- end }}

{{/* Env, probes and security every container shares (each declares its ports, with
     `metrics` on 8080). */}}
{{- define "ocm-placement.container" -}}
env:
- name: POD_NAMESPACE
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
- name: RUST_LOG
  value: {{ .Values.logLevel | quote }}
livenessProbe:
  httpGet: {path: /healthz, port: metrics}
  periodSeconds: 20
readinessProbe:
  httpGet: {path: /readyz, port: metrics}
securityContext:
  allowPrivilegeEscalation: false
  readOnlyRootFilesystem: true
  runAsNonRoot: true
  capabilities: {drop: ["ALL"]}
  seccompProfile: {type: RuntimeDefault}
{{- end }}
