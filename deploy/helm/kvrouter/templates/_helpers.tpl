{{- define "kvrouter.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "kvrouter.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "kvrouter.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kvrouter.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "kvrouter.labels" -}}
{{ include "kvrouter.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "kvrouter.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "kvrouter.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* A Deployment when the state dir is off, else a StatefulSet. */}}
{{- define "kvrouter.kind" -}}
{{- if .Values.persistence.enabled -}}StatefulSet{{- else -}}Deployment{{- end -}}
{{- end -}}

{{- define "kvrouter.discoveryNamespace" -}}
{{- default .Release.Namespace .Values.discovery.kubernetes.namespace -}}
{{- end -}}

{{- define "kvrouter.checks" -}}
{{- if and (gt (int .Values.replicas) 1) (not .Values.nats.url) -}}
{{- fail "replicas > 1 needs nats.url: replicas without NATS would each keep a registry of their own" -}}
{{- end -}}
{{- $k := .Values.discovery.kubernetes -}}
{{- if and $k.enabled (not $k.selector) (not $k.inferencePool) -}}
{{- fail "discovery.kubernetes.enabled needs discovery.kubernetes.selector or discovery.kubernetes.inferencePool" -}}
{{- end -}}
{{- if and .Values.discovery.dns.name (not .Values.discovery.model) -}}
{{- fail "discovery.dns.name needs discovery.model" -}}
{{- end -}}
{{- end -}}
