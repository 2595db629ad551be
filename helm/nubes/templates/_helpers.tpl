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

{{/* A service's image: always from the named registry (no implicit Docker Hub). */}}
{{- define "nubes.image" -}}
{{- $registry := required "image.registry is required: the registry your images are pushed to (no implicit registry)" .root.Values.image.registry -}}
{{- printf "%s/%s%s:%s" (trimSuffix "/" $registry) .root.Values.image.repositoryPrefix .name (default .root.Chart.AppVersion .root.Values.image.tag) -}}
{{- end -}}

{{/*
The Secret keys one service mounts, as a YAML map NUBES_<SETTING> ->
key: mongo-uri and (for NATS users) nats-url and its NATS password, then
services.<name>.secretFiles. A chart-made Secret mounts only the keys it
holds (an optional credential left empty stays unset); an existing
Secret must hold them all. Call with (dict "root" $ "name" $name "cfg" $cfg).
*/}}
{{- define "nubes.secretFiles" -}}
{{- $root := .root -}}
{{- $out := dict "NUBES_MONGO_URI" "mongo-uri" -}}
{{- if include "nubes.usesNATS" . -}}
{{- $_ := set $out "NUBES_NATS_URL" "nats-url" -}}
{{- if $root.Values.nats.auth.enabled -}}
{{- $_ := set $out "NUBES_NATS_PASSWORD" (include "nubes.natsPasswordKey" .) -}}
{{- end -}}
{{- end -}}
{{- $held := include "nubes.secretData" $root | fromYaml -}}
{{- range $k, $key := .cfg.secretFiles -}}
{{- if or $root.Values.secrets.existingSecret (hasKey $held $key) -}}
{{- $_ := set $out $k $key -}}
{{- end -}}
{{- end -}}
{{- toYaml $out -}}
{{- end -}}

{{/*
The data of the chart-made Secret, as YAML. A generated password (the
admin's, the NATS users') is kept across upgrades by reading the Secret
back (lookup); helm template, which cannot, makes a new one each time.
*/}}
{{- define "nubes.secretData" -}}
{{- if not .Values.secrets.existingSecret -}}
{{- $s := .Values.secrets -}}
{{- $old := dict -}}
{{- with lookup "v1" "Secret" .Release.Namespace (include "nubes.secretName" .) -}}
{{- $old = .data | default dict -}}
{{- end -}}
{{- $out := dict "mongo-uri" (required "secrets.mongoURI (or secrets.existingSecret) is required" $s.mongoURI) "nats-url" (required "secrets.natsURL (or secrets.existingSecret) is required" $s.natsURL) -}}
{{- range $key, $value := dict "signing-key" $s.signingKey "encryption-keys" $s.encryptionKeys "smtp-username" $s.smtpUsername "smtp-password" $s.smtpPassword "service-token" $s.serviceToken -}}
{{- if $value -}}
{{- $_ := set $out $key $value -}}
{{- end -}}
{{- end -}}
{{- $generated := dict -}}
{{- if include "nubes.identityEnabled" . -}}
{{- $_ := set $generated "admin-password" $s.adminPassword -}}
{{- end -}}
{{- if .Values.nats.auth.enabled -}}
{{- range $name, $svc := .Values.services -}}
{{- if and $svc.enabled (include "nubes.usesNATS" (dict "root" $ "name" $name)) -}}
{{- $_ := set $generated (include "nubes.natsPasswordKey" (dict "name" $name)) (get ($s.natsPasswords | default dict) $name | default "") -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- range $key, $value := $generated -}}
{{- if not $value -}}
{{- $value = get $old $key | default "" | b64dec | default (randAlphaNum 32) -}}
{{- end -}}
{{- $_ := set $out $key $value -}}
{{- end -}}
{{- toYaml $out -}}
{{- end -}}
{{- end -}}

{{/* The public base URL of the Ingress, when it has a host. */}}
{{- define "nubes.publicURL" -}}
{{- if and .Values.ingress.enabled .Values.ingress.host -}}
{{- printf "%s://%s" (ternary "https" "http" (not (empty .Values.ingress.tls))) .Values.ingress.host -}}
{{- end -}}
{{- end -}}

{{/*
production: true refuses what a production deployment must not run
without. Included by the templates that need it (NOTES too).
*/}}
{{- define "nubes.checkProduction" -}}
{{- if .Values.production -}}
{{- $ing := .Values.ingress -}}
{{- if not $ing.enabled -}}{{- fail "production: ingress.enabled must be true (the Ingress is the one way in)" -}}{{- end -}}
{{- $_ := required "production: ingress.host is required (an Ingress without a host serves any host)" $ing.host -}}
{{- $covered := false -}}
{{- range $ing.tls -}}{{- if and .secretName (has $ing.host (.hosts | default list)) -}}{{- $covered = true -}}{{- end -}}{{- end -}}
{{- if not $covered -}}{{- fail (printf "production: ingress.tls must hold a secretName for the host %s" $ing.host) -}}{{- end -}}
{{- if and .Values.grpc.enabled .Values.grpc.ingress.enabled -}}
{{- $gcovered := false -}}
{{- range .Values.grpc.ingress.tls -}}{{- if .secretName -}}{{- $gcovered = true -}}{{- end -}}{{- end -}}
{{- if not $gcovered -}}{{- fail "production: grpc.ingress.tls must hold a secretName (a wildcard certificate for *.<grpc.ingress.domain>)" -}}{{- end -}}
{{- end -}}
{{- if not .Values.nats.auth.enabled -}}{{- fail "production: nats.auth.enabled must be true (each service its own NATS user)" -}}{{- end -}}
{{- if not .Values.networkPolicy.enabled -}}{{- fail "production: networkPolicy.enabled must be true" -}}{{- end -}}
{{- if not .Values.secrets.existingSecret -}}
{{- if not (regexMatch `^mongodb(\+srv)?://[^/@]+:[^/@]+@` .Values.secrets.mongoURI) -}}{{- fail "production: secrets.mongoURI must hold a user and password (or use secrets.existingSecret)" -}}{{- end -}}
{{- end -}}
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

{{/*
nubes.grpcServiceURLs: identity's grpc_service_urls, where upstream's
clients dial each service (endpoint/list answers them): the gRPC
Ingress's host when it is on (grpc+ssl on 443 with TLS, grpc on 80
without), else the in-cluster Service's gRPC port.
*/}}
{{- define "nubes.grpcServiceURLs" -}}
{{- $root := . -}}
{{- $g := .Values.grpc.ingress -}}
{{- $urls := list -}}
{{- range $name := keys .Values.services | sortAlpha -}}
{{- $svc := get $root.Values.services $name -}}
{{- if and $svc.enabled $svc.path -}}
{{- if $g.enabled -}}
{{- if $g.tls -}}
{{- $urls = append $urls (printf "%s=grpc+ssl://%s.%s:443" $name $name $g.domain) -}}
{{- else -}}
{{- $urls = append $urls (printf "%s=grpc://%s.%s:80" $name $name $g.domain) -}}
{{- end -}}
{{- else -}}
{{- $urls = append $urls (printf "%s=grpc://%s.%s.svc:%d" $name (include "nubes.serviceName" (dict "root" $root "name" $name)) $root.Release.Namespace (int $root.Values.grpc.port)) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- join "," $urls -}}
{{- end -}}
