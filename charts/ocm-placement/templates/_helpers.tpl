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

{{/* An image: (list $ "<name>" "<digest>") -> <registry>/<name>@<digest>, or without a digest
     <registry>/<name>:<tag>, the names images/build.sh tags (tests/e2e/tests/images.rs checks
     they agree). No image is published anywhere: without image.registry, nothing to run. */}}
{{- define "ocm-placement.image" -}}
{{- $root := index . 0 -}}
{{- $registry := required "image.registry is empty: no ocm-placement images are published. Build and push them with `images/build.sh --push <registry>` (in the project's repository), then set image.registry=<registry>" $root.Values.image.registry -}}
{{- $digest := "" -}}
{{- if gt (len .) 2 }}{{ $digest = index . 2 }}{{ end -}}
{{- if $digest -}}
{{ printf "%s/%s@%s" $registry (index . 1) $digest }}
{{- else -}}
{{ printf "%s/%s:%s" $registry (index . 1) (include "ocm-placement.tag" $root) }}
{{- end -}}
{{- end }}

{{/* The labels that select a component's pods: (list $ "<component>"). */}}
{{- define "ocm-placement.selectorLabels" -}}
app.kubernetes.io/instance: {{ (index . 0).Release.Name }}
app.kubernetes.io/name: {{ index . 1 }}
{{- end }}

{{/* A component's pod metadata: (list $ <its values> "<component>"). Its podLabels cannot
     change the selector labels. Every per-component setting is read so that a value set from
     an earlier chart (without it) renders as the default. */}}
{{- define "ocm-placement.podMetadata" -}}
{{- $root := index . 0 -}}
{{- $c := index . 1 -}}
{{- $selector := include "ocm-placement.selectorLabels" (list $root (index . 2)) | fromYaml -}}
labels: {{- toYaml (merge $selector ($c.podLabels | default dict)) | nindent 2 }}
{{- with $c.podAnnotations }}
annotations: {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* Where and how a component's pods run: (list $ <its values> "<component>"). A topology
     spread constraint without a labelSelector selects the component's own pods. */}}
{{- define "ocm-placement.podScheduling" -}}
{{- $root := index . 0 -}}
{{- $c := index . 1 -}}
{{- $name := index . 2 -}}
{{- with $c.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with $c.nodeSelector }}
nodeSelector: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $c.affinity }}
affinity: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $c.tolerations }}
tolerations: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $c.topologySpreadConstraints }}
topologySpreadConstraints:
{{- range . }}
{{- $constraint := deepCopy . }}
{{- if not (hasKey $constraint "labelSelector") }}
{{- $_ := set $constraint "labelSelector" (dict "matchLabels" (include "ocm-placement.selectorLabels" (list $root $name) | fromYaml)) }}
{{- end }}
- {{ toYaml $constraint | nindent 2 | trim }}
{{- end }}
{{- end }}
{{- end }}

{{/* A component's extraArgs after its arguments: (list <its arguments as rendered> <its
     values> "<values key>"). The binaries refuse a flag given twice, so a flag the chart
     already sets, or one listed twice, is refused here, naming it. */}}
{{- define "ocm-placement.extraArgs" -}}
{{- $args := index . 0 -}}
{{- $key := index . 2 -}}
{{- $seen := dict -}}
{{- range ((index . 1).extraArgs | default list) }}
{{- $flag := regexReplaceAll "=.*$" . "" }}
{{- if regexMatch (printf "(?m)^- \"?%s(=|\"?$)" (regexQuoteMeta $flag)) $args }}
{{- fail (printf "%s.extraArgs: %s is already among the arguments the chart renders (from its values: see the chart's values table), and the binary refuses a flag given twice" $key $flag) }}
{{- end }}
{{- if hasKey $seen $flag }}
{{- fail (printf "%s.extraArgs: %s is listed twice; the binary takes it once" $key $flag) }}
{{- end }}
{{- $_ := set $seen $flag true }}
- {{ . | quote }}
{{- end }}
{{- end }}

{{/* A component's PodDisruptionBudget: (list $ <its values> "<component>"), only with more
     than one replica (a budget over one pod protects nothing and could only block drains). */}}
{{- define "ocm-placement.podDisruptionBudget" -}}
{{- $root := index . 0 -}}
{{- $c := index . 1 -}}
{{- $name := index . 2 -}}
{{- if and (dig "podDisruptionBudget" "enabled" true $c) (gt (int $c.replicas) 1) }}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ $name }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "ocm-placement.labels" $root | nindent 4 }}
    app.kubernetes.io/name: {{ $name }}
spec:
  maxUnavailable: {{ dig "podDisruptionBudget" "maxUnavailable" 1 $c | toJson }}
  # An unready replica serves nothing: evicting it never waits for the budget.
  unhealthyPodEvictionPolicy: AlwaysAllow
  selector:
    matchLabels:
      {{- include "ocm-placement.selectorLabels" (list $root $name) | nindent 6 }}
{{- end }}
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
