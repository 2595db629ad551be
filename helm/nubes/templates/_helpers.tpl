{{/* Names, labels and the per-service settings every template shares. */}}

{{- define "nubes.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "nubes.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The name of one service's objects: <fullname>-<service>. */}}
{{- define "nubes.serviceName" -}}
{{- printf "%s-%s" (include "nubes.fullname" .root) .name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "nubes.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "nubes.labels" -}}
helm.sh/chart: {{ include "nubes.chart" . }}
app.kubernetes.io/name: {{ include "nubes.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: nubes
{{- end -}}

{{/* Labels of one service's objects; call with (dict "root" $ "name" $name). */}}
{{- define "nubes.serviceLabels" -}}
{{ include "nubes.labels" .root }}
app.kubernetes.io/component: {{ .name }}
{{- end -}}

{{/* Selector of one service's pods; never changes across upgrades. */}}
{{- define "nubes.selectorLabels" -}}
app.kubernetes.io/name: {{ include "nubes.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .name }}
{{- end -}}

{{- define "nubes.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "nubes.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "nubes.secretName" -}}
{{- default (printf "%s-secrets" (include "nubes.fullname" .)) .Values.secrets.existingSecret -}}
{{- end -}}

{{/*
The settings of one service as YAML: serviceDefaults, overridden by
services.<name>; maps are merged one level deep, and a value set to false
or 0 in the service wins (unlike mergeOverwrite).
Call with (dict "root" $ "svc" $svc) and read with fromYaml.
*/}}
{{- define "nubes.settings" -}}
{{- $out := deepCopy .root.Values.serviceDefaults -}}
{{- range $k, $v := .svc -}}
{{- $cur := get $out $k -}}
{{- if and (kindIs "map" $v) (kindIs "map" $cur) -}}
{{- range $k2, $v2 := $v -}}
{{- $_ := set $cur $k2 $v2 -}}
{{- end -}}
{{- else -}}
{{- $_ := set $out $k $v -}}
{{- end -}}
{{- end -}}
{{- toYaml $out -}}
{{- end -}}

{{- define "nubes.image" -}}
{{- $img := printf "%s%s:%s" .root.Values.image.repositoryPrefix .name (default .root.Chart.AppVersion .root.Values.image.tag) -}}
{{- if .root.Values.image.registry -}}
{{- printf "%s/%s" (trimSuffix "/" .root.Values.image.registry) $img -}}
{{- else -}}
{{- $img -}}
{{- end -}}
{{- end -}}

{{/* Whether identity runs in this release. */}}
{{- define "nubes.identityEnabled" -}}
{{- $id := get .Values.services "identity" | default dict -}}
{{- if $id.enabled -}}true{{- end -}}
{{- end -}}

{{- define "nubes.identityURL" -}}
{{- if .Values.auth.identityURL -}}
{{- .Values.auth.identityURL -}}
{{- else if include "nubes.identityEnabled" . -}}
{{- printf "http://%s.%s.svc:80" (include "nubes.serviceName" (dict "root" . "name" "identity")) .Release.Namespace -}}
{{- end -}}
{{- end -}}

{{- define "nubes.jwksURL" -}}
{{- if .Values.auth.jwksURL -}}
{{- .Values.auth.jwksURL -}}
{{- else if not .Values.auth.jwks -}}
{{- printf "http://%s.%s.svc:80/.well-known/jwks.json" (include "nubes.serviceName" (dict "root" . "name" "identity")) .Release.Namespace -}}
{{- end -}}
{{- end -}}

{{/*
NUBES_SERVICE_URLS: every enabled service that serves HTTP (has a path),
by name, at its in-cluster Service, for calls between services and
identity's endpoint/list.
*/}}
{{- define "nubes.serviceURLs" -}}
{{- $root := . -}}
{{- $urls := list -}}
{{- range $name := keys .Values.services | sortAlpha -}}
{{- $svc := get $root.Values.services $name -}}
{{- if and $svc.enabled $svc.path -}}
{{- $urls = append $urls (printf "%s=http://%s.%s.svc:80" $name (include "nubes.serviceName" (dict "root" $root "name" $name)) $root.Release.Namespace) -}}
{{- end -}}
{{- end -}}
{{- join "," $urls -}}
{{- end -}}
