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

{{/*
Bytes of a size as the sidecar reads one (config.ByteSize: a whole number
and B, KiB, MiB, GiB or TiB); what names it in the error.
*/}}
{{- define "geo-sidecar.bytes" -}}
{{- $v := toString .value }}
{{- $m := regexFindAll "^([0-9]+) ?(B|KiB|MiB|GiB|TiB)$" $v 1 }}
{{- if not $m }}
{{- fail (printf "%s: %q is not a size; write a whole number and a unit such as \"512MiB\" (B, KiB, MiB, GiB or TiB)" .what $v) }}
{{- end }}
{{- $unit := regexReplaceAll "^[0-9]+ ?" $v "" }}
{{- $mult := get (dict "B" 1 "KiB" 1024 "MiB" 1048576 "GiB" 1073741824 "TiB" 1099511627776) $unit }}
{{- mul (regexReplaceAll "[^0-9]" $v "" | int64) $mult }}
{{- end }}

{{/*
Bytes of a Kubernetes memory quantity: a whole number, with Ki, Mi, Gi,
Ti, k, M, G, T or no suffix.
*/}}
{{- define "geo-sidecar.quantity" -}}
{{- $v := toString .value }}
{{- if not (regexMatch "^[0-9]+(Ki|Mi|Gi|Ti|k|M|G|T)?$" $v) }}
{{- fail (printf "%s: %q: the chart checks it against the sidecar's memory budgets and reads a whole number with Ki, Mi, Gi, Ti, k, M, G, T or no suffix, such as \"1Gi\"" .what $v) }}
{{- end }}
{{- $unit := regexReplaceAll "^[0-9]+" $v "" }}
{{- $mult := get (dict "" 1 "Ki" 1024 "Mi" 1048576 "Gi" 1073741824 "Ti" 1099511627776 "k" 1000 "M" 1000000 "G" 1000000000 "T" 1000000000000) $unit }}
{{- mul (regexReplaceAll "[^0-9]" $v "" | int64) $mult }}
{{- end }}

{{/*
Refuses a memory limit below what the sidecar may use: its three memory
budgets (config.sidecar.receive_budget, send_budget, readback_budget; the
sidecar's defaults where unset) plus 100 MiB for the process itself
(docs/deploy.md, Memory). Without a memory limit there is nothing to check.
*/}}
{{- define "geo-sidecar.checkMemory" -}}
{{- $limit := dig "limits" "memory" "" (default dict .Values.resources) }}
{{- if $limit }}
{{- $sidecar := default dict .Values.config.sidecar }}
{{- $sum := 104857600 }}
{{- range $field, $default := dict "receive_budget" "512MiB" "send_budget" "256MiB" "readback_budget" "64MiB" }}
{{- $v := index $sidecar $field | default $default }}
{{- $sum = add $sum (include "geo-sidecar.bytes" (dict "value" $v "what" (printf "config.sidecar.%s" $field)) | int64) }}
{{- end }}
{{- $lim := include "geo-sidecar.quantity" (dict "value" $limit "what" "resources.limits.memory") | int64 }}
{{- if lt $lim $sum }}
{{- fail (printf "resources.limits.memory: %s is below what the sidecar may use: receive_budget + send_budget + readback_budget + 100MiB = %dMiB; raise the limit or lower the budgets in config.sidecar (values.yaml says how)" (toString $limit) (div $sum 1048576)) }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The Go runtime's soft memory limit (GOMEMLIMIT) in bytes: 95 % of
resources.limits.memory; empty without a limit, or when extraEnv sets
GOMEMLIMIT itself. Go does not read the container's memory limit: without
it the heap may grow to twice what is live before a collection (GOGC=100),
so budgets half full (a drain over many partitions) could take the pod
past its limit and get it killed; with it the collector runs sooner as
the process nears the limit. The 5 % left is for what the runtime does
not count (the binary's mapped pages).
*/}}
{{- define "geo-sidecar.goMemLimit" -}}
{{- $limit := dig "limits" "memory" "" (default dict .Values.resources) }}
{{- $own := true }}
{{- range .Values.extraEnv }}
{{- if eq (toString .name) "GOMEMLIMIT" }}{{ $own = false }}{{ end }}
{{- end }}
{{- if and $limit $own }}
{{- $lim := include "geo-sidecar.quantity" (dict "value" $limit "what" "resources.limits.memory") | int64 }}
{{- div (mul $lim 95) 100 }}
{{- end }}
{{- end }}
