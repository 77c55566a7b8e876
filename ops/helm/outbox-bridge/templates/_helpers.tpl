{{/* Names, labels and the pieces the bridge's Deployment and migration Job share. */}}

{{- define "outbox-bridge.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "outbox-bridge.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else if contains (include "outbox-bridge.name" .) .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name (include "outbox-bridge.name" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{- define "outbox-bridge.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: outbox-bridge
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}

{{/* The bridge's pods: `app.kubernetes.io/name: outbox-bridge` and `bridge-name` as docs/OPERATIONS.md scrapes them. */}}
{{- define "outbox-bridge.selectorLabels" -}}
app.kubernetes.io/name: {{ include "outbox-bridge.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: bridge
bridge-name: {{ .Values.bridge.name | quote }}
{{- end }}

{{- define "outbox-bridge.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "outbox-bridge.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "outbox-bridge.image" -}}
{{- printf "%s:%s" .image.repository (default .chart.AppVersion .image.tag) }}
{{- end }}

{{/* A value that must be given, with the message saying which and why. */}}
{{- define "outbox-bridge.required" -}}
{{- required (printf "%s is required: %s" (index . 0) (index . 1)) (index . 2) }}
{{- end }}

{{/*
Refuse a settings map that would put a secret into the pod spec in clear: passwords, the database URL (it holds
one) and SASL/JAAS material come from existing Secrets only. Called with (list "bridge.settings" <map>).
*/}}
{{- define "outbox-bridge.noSecrets" -}}
{{- $where := index . 0 }}
{{- range $name, $value := index . 1 }}
{{- if or (regexMatch "(?i)(PASSWORD|SECRET|TOKEN|JAAS|OUTBOX_DB_URL|ACCESS_KEY|PRIVATE_KEY|CREDENTIAL)" $name) (regexMatch "(?i)(password|jaas\\.config|secret)" (toString $value)) }}
{{- fail (printf "%s.%s looks like a secret; the chart takes secrets only from existing Secrets (database.urlSecret, kafka.sasl.passwordSecret, schemaRegistry.passwordSecret, projections.secretEnv)" $where $name) }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The Kafka client settings of the bridge and the projections (names as in the README). Called with
(dict "kafka" .Values.kafka "sasl" <the principal's sasl values>): each process may connect as its own principal.
*/}}
{{- define "outbox-bridge.kafkaEnv" -}}
{{- $kafka := .kafka }}
{{- $sasl := .sasl -}}
- name: KAFKA_BOOTSTRAP_SERVERS
  value: {{ include "outbox-bridge.required" (list "kafka.bootstrapServers" "the brokers the bridge publishes to" $kafka.bootstrapServers) | quote }}
{{- with $kafka.securityProtocol }}
- name: KAFKA_SECURITY_PROTOCOL
  value: {{ . | quote }}
{{- end }}
{{- with $sasl.mechanism }}
- name: KAFKA_SASL_MECHANISM
  value: {{ . | quote }}
{{- end }}
{{- with $sasl.username }}
- name: KAFKA_SASL_USERNAME
  value: {{ . | quote }}
{{- end }}
{{- if $sasl.passwordSecret.name }}
- name: KAFKA_SASL_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ $sasl.passwordSecret.name }}
      key: {{ $sasl.passwordSecret.key }}
{{- else if $sasl.mechanism }}
{{- fail "a Kafka SASL mechanism is set but no passwordSecret.name: name the existing Secret that holds the password" }}
{{- end }}
{{- if $kafka.caSecret.name }}
- name: KAFKA_SSL_CA_LOCATION
  value: {{ printf "/etc/outbox/kafka-ca/%s" $kafka.caSecret.key | quote }}
{{- end }}
{{- end }}

{{/*
The value format and its schema registry (BRIDGE_VALUE_FORMAT, BRIDGE_SCHEMA_*): nothing in the default json
format. The registry's password comes only from an existing Secret, and a URL carrying credentials is refused.
*/}}
{{- define "outbox-bridge.registryEnv" -}}
{{- $format := .Values.bridge.valueFormat | default "json" }}
{{- $registry := .Values.schemaRegistry }}
{{- if not (has $format (list "json" "json-schema")) }}
{{- fail (printf "bridge.valueFormat is %q: give json (the payload, byte for byte) or json-schema (a schema registry's wire format)" $format) }}
{{- end }}
{{- if eq $format "json" }}
{{- if or $registry.url $registry.subjects $registry.username $registry.passwordSecret.name }}
{{- fail "schemaRegistry is set but bridge.valueFormat is json: set bridge.valueFormat=json-schema to use the registry, or leave schemaRegistry empty" }}
{{- end }}
{{- else }}
{{- $url := include "outbox-bridge.required" (list "schemaRegistry.url" "the schema registry's Confluent-compatible API, for bridge.valueFormat=json-schema" $registry.url) }}
{{- if regexMatch "://[^/]*@" $url }}
{{- fail "schemaRegistry.url carries credentials: give the user in schemaRegistry.username and the password in an existing Secret named by schemaRegistry.passwordSecret.name" }}
{{- end }}
{{- if and $registry.subjects (not (has $registry.subjects (list "topic-record" "record" "topic"))) }}
{{- fail (printf "schemaRegistry.subjects is %q: give topic-record, record or topic" $registry.subjects) }}
{{- end }}
{{- if and $registry.username (not $registry.passwordSecret.name) }}
{{- fail "schemaRegistry.username is set but no schemaRegistry.passwordSecret.name: name the existing Secret that holds the registry's password" }}
{{- end }}
{{- if and $registry.passwordSecret.name (not $registry.username) }}
{{- fail "schemaRegistry.passwordSecret.name is set but no schemaRegistry.username: give the user the password belongs to" }}
{{- end -}}
- name: BRIDGE_VALUE_FORMAT
  value: "json-schema"
- name: BRIDGE_SCHEMA_REGISTRY_URL
  value: {{ $url | quote }}
{{- with $registry.subjects }}
- name: BRIDGE_SCHEMA_SUBJECTS
  value: {{ . | quote }}
{{- end }}
{{- if $registry.username }}
- name: BRIDGE_SCHEMA_REGISTRY_USER
  value: {{ $registry.username | quote }}
- name: BRIDGE_SCHEMA_REGISTRY_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ $registry.passwordSecret.name }}
      key: {{ $registry.passwordSecret.key }}
{{- end }}
{{- end }}
{{- end }}

{{/* Volumes (and their mounts) every pod of the chart gets: a writable /tmp under a read-only root, and CAs. */}}
{{- define "outbox-bridge.caVolumes" -}}
- name: tmp
  emptyDir: {}
{{- if .Values.kafka.caSecret.name }}
- name: kafka-ca
  secret:
    secretName: {{ .Values.kafka.caSecret.name }}
{{- end }}
{{- if .Values.database.caSecret.name }}
- name: db-ca
  secret:
    secretName: {{ .Values.database.caSecret.name }}
{{- end }}
{{- end }}

{{- define "outbox-bridge.caVolumeMounts" -}}
- name: tmp
  mountPath: /tmp
{{- if .Values.kafka.caSecret.name }}
- name: kafka-ca
  mountPath: /etc/outbox/kafka-ca
  readOnly: true
{{- end }}
{{- if .Values.database.caSecret.name }}
- name: db-ca
  mountPath: /etc/outbox/db-ca
  readOnly: true
{{- end }}
{{- end }}

{{/* Refuse, in a settings map, a variable the chart sets from its own values. Called with (list "where" <map> <names>). */}}
{{- define "outbox-bridge.notManaged" -}}
{{- $where := index . 0 }}
{{- $managed := index . 2 }}
{{- range $name, $value := index . 1 }}
{{- if has $name $managed }}
{{- fail (printf "%s.%s is set by the chart from its own values (see values.yaml): set it there" $where $name) }}
{{- end }}
{{- end }}
{{- end }}

{{/*
A projection's Kubernetes name: its declared name made DNS-safe (orders_current -> orders-current), at most 47
characters since Spark prefixes executor pods with it.
*/}}
{{- define "outbox-bridge.projectionName" -}}
{{- printf "%s-%s" (include "outbox-bridge.fullname" .root) (.name | replace "_" "-" | lower) | trunc 47 | trimSuffix "-" }}
{{- end }}

{{- define "outbox-bridge.projectionsServiceAccountName" -}}
{{- printf "%s-projections" (include "outbox-bridge.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "outbox-bridge.projectionSelectorLabels" -}}
app.kubernetes.io/name: {{ include "outbox-bridge.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: projection
projection: {{ .name | quote }}
{{- end }}
