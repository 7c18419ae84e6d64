{{/*
Names, labels and the namespace lists every component shares.
*/}}

{{/* The chart name, or nameOverride. */}}
{{- define "eo.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
The prefix of every object name: fullnameOverride, else the release name when it already
contains the chart name, else "<release>-<chart>". Truncated so that suffixes such as
"-operator" still fit in 63 characters.
*/}}
{{- define "eo.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "eo.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Labels on every object; pass a dict with "root" and "component". */}}
{{- define "eo.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "eo.selectorLabels" . }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/part-of: eo
{{- with .root.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Labels that select a component's pods; pass a dict with "root" and "component". */}}
{{- define "eo.selectorLabels" -}}
app.kubernetes.io/name: {{ include "eo.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* The operator's ServiceAccount name. */}}
{{- define "eo.operator.serviceAccountName" -}}
{{- default (printf "%s-operator" (include "eo.fullname" .)) .Values.operator.serviceAccount.name -}}
{{- end -}}

{{/* The drivers' ServiceAccount name (the same in every pipeline namespace). */}}
{{- define "eo.driver.serviceAccountName" -}}
{{- default (printf "%s-driver" (include "eo.fullname" .)) .Values.driver.serviceAccount.name -}}
{{- end -}}

{{/*
An image reference; pass a dict with "root" and "image" (repository, tag, digest).
global.imageRegistry, when set, goes before the repository (an umbrella chart's mirror); a
digest wins over the tag ("repository@sha256:..."); the tag defaults to the appVersion.
*/}}
{{- define "eo.image" -}}
{{- $repository := .image.repository -}}
{{- with (.root.Values.global).imageRegistry -}}
{{- $repository = printf "%s/%s" (trimSuffix "/" .) $repository -}}
{{- end -}}
{{- if .image.digest -}}
{{- printf "%s@%s" $repository .image.digest -}}
{{- else -}}
{{- printf "%s:%s" $repository (default .root.Chart.AppVersion .image.tag) -}}
{{- end -}}
{{- end -}}

{{/* The operator image. */}}
{{- define "eo.operator.image" -}}
{{- include "eo.image" (dict "root" . "image" .Values.operator.image) -}}
{{- end -}}

{{/* The job image given to driver pods (EO_JOB_IMAGE). */}}
{{- define "eo.driver.image" -}}
{{- include "eo.image" (dict "root" . "image" .Values.driver.image) -}}
{{- end -}}

{{/*
Image pull secrets as a JSON list of {name: ...}: global.imagePullSecrets first (umbrella
charts give them as names or as {name: ...}), then imagePullSecrets; duplicates dropped. Use
with fromJsonArray.
*/}}
{{- define "eo.imagePullSecrets" -}}
{{- $secrets := list -}}
{{- range ((.Values.global).imagePullSecrets | default list) -}}
{{- $secrets = append $secrets (kindIs "string" . | ternary (dict "name" .) .) -}}
{{- end -}}
{{- range .Values.imagePullSecrets -}}
{{- $secrets = append $secrets . -}}
{{- end -}}
{{- toJson ($secrets | uniq) -}}
{{- end -}}

{{/*
A security context from values; pass a dict with "root" and "context". With openshift: true
the platform assigns the UID, GID and fsGroup (restricted-v2 SCC), so none is rendered; a key
set to null in the values is gone already (Helm drops null values).
*/}}
{{- define "eo.securityContext" -}}
{{- $context := .context | default dict -}}
{{- if .root.Values.openshift -}}
{{- $context = omit $context "runAsUser" "runAsGroup" "fsGroup" -}}
{{- end -}}
{{- toYaml $context -}}
{{- end -}}

{{/* "true" when the operator watches every namespace (no watchNamespaces). */}}
{{- define "eo.operator.clusterWide" -}}
{{- if empty .Values.operator.watchNamespaces }}true{{ end -}}
{{- end -}}

{{/*
The namespaces where pipelines run, as a JSON list: driver.namespaces, else the watched
namespaces, else the release namespace. Use with fromJsonArray.
*/}}
{{- define "eo.driver.namespaces" -}}
{{- $namespaces := .Values.driver.namespaces -}}
{{- if empty $namespaces -}}
{{- $namespaces = .Values.operator.watchNamespaces -}}
{{- end -}}
{{- if empty $namespaces -}}
{{- $namespaces = list .Release.Namespace -}}
{{- end -}}
{{- toJson $namespaces -}}
{{- end -}}

{{/*
The operator's rules inside the namespaces it serves: the same list goes into the ClusterRole
(cluster-wide) or into one Role per watched namespace (namespaced). No wildcards: each verb is
one the operator uses.
*/}}
{{- define "eo.operator.namespacedRules" -}}
# Pipelines: watch them, add/remove the finalizer and annotations (patch), write status.
- apiGroups: [eo.dev]
  resources: [exactlyoncepipelines]
  verbs: [get, list, watch, patch, update]
- apiGroups: [eo.dev]
  resources: [exactlyoncepipelines/status]
  verbs: [get, patch, update]
- apiGroups: [eo.dev]
  resources: [exactlyoncepipelines/finalizers]
  verbs: [update]
# Driver pods and the Spark objects around them.
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, watch, create, delete, patch]
- apiGroups: [""]
  resources: [configmaps, services]
  verbs: [get, list, watch, create, delete, patch]
# Sink DSNs, read for recovery of in-doubt transactions.
- apiGroups: [""]
  resources: [secrets]
  verbs: [get]
# kopf posts events about handler progress and errors.
- apiGroups: [""]
  resources: [events]
  verbs: [create, patch]
- apiGroups: [events.k8s.io]
  resources: [events]
  verbs: [create, patch]
{{- end -}}

{{/*
A generated alert file of files/ (scripts/generate_monitoring.py) with its ${name} placeholders
filled from the values: runbookBaseUrl from monitoring.runbookBaseUrl, the others from
monitoring.alertThresholds. Text replacement, not templating, so the alerts' own {{ $labels }}
templates reach Prometheus and Grafana untouched. Pass a dict with "root" and "file".
*/}}
{{- define "eo.monitoring.alertFile" -}}
{{- $text := .root.Files.Get .file -}}
{{- if not $text -}}
{{- fail (printf "%s is missing from the chart: run scripts/generate_monitoring.py" .file) -}}
{{- end -}}
{{- $monitoring := .root.Values.monitoring -}}
{{- $text = replace "${runbookBaseUrl}" $monitoring.runbookBaseUrl $text -}}
{{- range $name, $value := $monitoring.alertThresholds -}}
{{- $text = replace (printf "${%s}" $name) (toString $value) $text -}}
{{- end -}}
{{- $left := regexFindAll "\\$\\{[a-z][A-Za-z0-9]*\\}" $text -1 -}}
{{- if $left -}}
{{- fail (printf "%s uses %s, which monitoring.alertThresholds does not set" .file (join ", " ($left | uniq))) -}}
{{- end -}}
{{- $text -}}
{{- end -}}

{{- /* The leader-election Lease's name (in the release namespace). */ -}}
{{- define "eo.operator.leaseName" -}}
{{- .Values.operator.leaderElection.leaseName | default (printf "%s-operator" (include "eo.fullname" .)) -}}
{{- end -}}

{{/*
NetworkPolicy peers of a destination (a dict with cidrs, namespaceSelector, podSelector), as a
JSON list: one ipBlock per CIDR, and one selector peer when either selector is set (a
podSelector alone means such pods in every namespace). An empty list means "any address":
the caller then leaves out `to`/`from`. Use with fromJsonArray.
*/}}
{{- define "eo.networkPolicy.peers" -}}
{{- $peers := list -}}
{{- range (.cidrs | default list) -}}
{{- $peers = append $peers (dict "ipBlock" (dict "cidr" .)) -}}
{{- end -}}
{{- if or .namespaceSelector .podSelector -}}
{{- $peer := dict "namespaceSelector" (dict) -}}
{{- with .namespaceSelector -}}
{{- $_ := set $peer "namespaceSelector" (dict "matchLabels" .) -}}
{{- end -}}
{{- with .podSelector -}}
{{- $_ := set $peer "podSelector" (dict "matchLabels" .) -}}
{{- end -}}
{{- $peers = append $peers $peer -}}
{{- end -}}
{{- toJson $peers -}}
{{- end -}}

{{/*
Egress rules to a list of destinations, as a JSON list: one rule per destination, its ports
on each of "protocols" (TCP unless given). A destination without ports, or set to null, gives
no rule (a rule without ports would open every port). Pass a dict with "destinations" and optionally
"protocols". Use with fromJsonArray.
*/}}
{{- define "eo.networkPolicy.egressRules" -}}
{{- $rules := list -}}
{{- $protocols := .protocols | default (list "TCP") -}}
{{- range .destinations -}}
{{- if . -}}
{{- $ports := list -}}
{{- range $port := (.ports | default list) -}}
{{- range $protocol := $protocols -}}
{{- $ports = append $ports (dict "protocol" $protocol "port" $port) -}}
{{- end -}}
{{- end -}}
{{- if $ports -}}
{{- $rule := dict "ports" $ports -}}
{{- with include "eo.networkPolicy.peers" . | fromJsonArray -}}
{{- $_ := set $rule "to" . -}}
{{- end -}}
{{- $rules = append $rules $rule -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- toJson $rules -}}
{{- end -}}

{{/*
Egress rules every eo pod gets when networkPolicy.egress.enabled: DNS (UDP and TCP) and the
databases; pass the root. Use with fromJsonArray.
*/}}
{{- define "eo.networkPolicy.commonEgress" -}}
{{- $egress := .Values.networkPolicy.egress -}}
{{- $dns := include "eo.networkPolicy.egressRules" (dict "destinations" (list $egress.dns) "protocols" (list "UDP" "TCP")) | fromJsonArray -}}
{{- $databases := include "eo.networkPolicy.egressRules" (dict "destinations" $egress.databases) | fromJsonArray -}}
{{- toJson (concat $dns $databases) -}}
{{- end -}}

{{/* Labels of the driver pods the operator creates (eo_operator.resources.driver_pod). */}}
{{- define "eo.driver.podLabels" -}}
app.kubernetes.io/managed-by: eo
app.kubernetes.io/component: driver
{{- end -}}

{{/* Labels of the executor pods drivers create (eo_jobs.runtime.session.EXECUTOR_LABELS). */}}
{{- define "eo.executor.podLabels" -}}
app.kubernetes.io/managed-by: eo
app.kubernetes.io/component: executor
{{- end -}}

{{/*
Peers of a pipeline's own traffic, in the policy's namespace: driver pods, and executor pods by
the label Spark gives every executor (spark-role: executor). Not by eo's executor labels: the
executors of a driver pinned to a job image older than those labels lack them, and they must
still reach their driver and it them.
*/}}
{{- define "eo.pipeline.peers" -}}
- podSelector:
    matchLabels:
      {{- include "eo.driver.podLabels" . | nindent 6 }}
- podSelector:
    matchLabels:
      spark-role: executor
{{- end -}}
