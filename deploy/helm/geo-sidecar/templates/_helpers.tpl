{{/* Chart name, truncated to the 63 characters Kubernetes allows. */}}
{{- define "geo-sidecar.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Release-qualified name; per-source objects append "-<source>". */}}
{{- define "geo-sidecar.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 50 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 50 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 50 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "geo-sidecar.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "geo-sidecar.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "geo-sidecar.selectorLabels" -}}
app.kubernetes.io/name: {{ include "geo-sidecar.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "geo-sidecar.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "geo-sidecar.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
The source clusters to run a Deployment for, as a JSON list: .Values.sources,
or every distinct source of config.replication. Each must be a cluster of
the config (the sidecar would refuse to start otherwise).
*/}}
{{- define "geo-sidecar.sources" -}}
{{- $clusters := list }}
{{- range .Values.config.clusters }}{{ $clusters = append $clusters .name }}{{ end }}
{{- $sources := .Values.sources }}
{{- if not $sources }}
{{- $sources = list }}
{{- range .Values.config.replication }}
{{- if not (has .source $sources) }}{{ $sources = append $sources .source }}{{ end }}
{{- end }}
{{- end }}
{{- if not $sources }}
{{- fail "no source cluster: set sources or give config.replication entries" }}
{{- end }}
{{- range $sources }}
{{- if not (has . $clusters) }}
{{- fail (printf "sources: %q is not a cluster of config.clusters (%s)" . (join ", " $clusters)) }}
{{- end }}
{{- if not (regexMatch "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$" .) }}
{{- fail (printf "sources: %q cannot be part of a Kubernetes name (lower-case letters, digits and '-')" .) }}
{{- end }}
{{- end }}
{{- toJson $sources }}
{{- end }}

{{/* The config as the sidecar reads it. */}}
{{- define "geo-sidecar.config" -}}
{{- $cfg := deepCopy .Values.config }}
{{- $sidecar := default dict $cfg.sidecar }}
{{- /* The pod's IP comes from --listen; keep the file self-consistent. */}}
{{- $_ := set $sidecar "listen" (printf "0.0.0.0:%v" .Values.metricsPort) }}
{{- $_ := set $cfg "sidecar" $sidecar }}
{{- toYaml $cfg }}
{{- end }}
