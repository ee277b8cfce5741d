{{/* The chart's name, at most 63 characters. */}}
{{- define "bpfbench.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The objects' name: the release's, with the chart's unless it holds it. */}}
{{- define "bpfbench.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* The namespace of every namespaced object: namespaceOverride, or the
release's (for installing as a dependency of an umbrella chart). */}}
{{- define "bpfbench.namespace" -}}
{{- default .Release.Namespace .Values.namespaceOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "bpfbench.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The labels every object carries. */}}
{{- define "bpfbench.labels" -}}
helm.sh/chart: {{ include "bpfbench.chart" . }}
{{ include "bpfbench.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: node-agent
app.kubernetes.io/part-of: bpfbench
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* The labels the DaemonSet, Service and monitors select on (immutable). */}}
{{- define "bpfbench.selectorLabels" -}}
app.kubernetes.io/name: {{ include "bpfbench.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "bpfbench.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "bpfbench.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "bpfbench.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* "true" when the daemon lists its node's pods: a target selects pods
(namespace, pod_labels or container), or the agent API is on (its sessions
may target a pod, run --agent.pod). */}}
{{- define "bpfbench.kubernetesTargets" -}}
{{- $k := false }}
{{- if and .Values.config.agent .Values.config.agent.enabled }}{{ $k = true }}{{ end }}
{{- range .Values.config.targets }}
{{- if or .namespace .pod_labels .container }}{{ $k = true }}{{ end }}
{{- end }}
{{- if $k }}true{{ end }}
{{- end }}

{{/* The daemon's configuration file. */}}
{{- define "bpfbench.config" -}}
{{- $cfg := deepCopy .Values.config }}
{{- $_ := set $cfg "listen_address" (printf ":%d" (int .Values.port)) }}
{{- toYaml $cfg }}
{{- end }}

{{/* The scheme of the probes and monitors. */}}
{{- define "bpfbench.scheme" -}}
{{- if and .Values.webConfig.secretName .Values.webConfig.tls }}https{{ else }}http{{ end }}
{{- end }}

{{/* The capabilities added to the container (ALL others are dropped). */}}
{{- define "bpfbench.capabilities" -}}
{{- $caps := list "BPF" "PERFMON" "SYS_PTRACE" "DAC_READ_SEARCH" }}
{{- range .Values.extraCapabilities }}
{{- $c := . | upper | trimPrefix "CAP_" }}
{{- if not (has $c $caps) }}{{ $caps = append $caps $c }}{{ end }}
{{- end }}
{{- toYaml $caps }}
{{- end }}
