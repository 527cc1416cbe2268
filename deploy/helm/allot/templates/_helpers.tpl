{{/* Names and labels. */}}

{{- define "allot.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "allot.fullname" -}}
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

{{- define "allot.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "allot.selectorLabels" -}}
app.kubernetes.io/name: {{ include "allot.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "allot.labels" -}}
helm.sh/chart: {{ include "allot.chart" . }}
{{ include "allot.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: allot
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "allot.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "allot.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "allot.image" -}}
{{- printf "%s:%s" .repository (toString .tag) -}}
{{- end -}}

{{/* Object names. */}}
{{- define "allot.coordinator.fullname" -}}{{ include "allot.fullname" . | trunc 51 | trimSuffix "-" }}-coordinator{{- end -}}
{{- define "allot.etcd.fullname" -}}{{ include "allot.fullname" . | trunc 58 | trimSuffix "-" }}-etcd{{- end -}}
{{- define "allot.admin.secretName" -}}
{{- if .Values.admin.existingSecret -}}{{ .Values.admin.existingSecret }}{{- else -}}{{ include "allot.fullname" . | trunc 57 | trimSuffix "-" }}-admin{{- end -}}
{{- end -}}

{{/* allot.region.fullname: $root, $region -> release-region (the regional Deployment). */}}
{{- define "allot.region.fullname" -}}
{{- $root := index . 0 -}}{{- $r := index . 1 -}}
{{- printf "%s-%s" (include "allot.fullname" $root | trunc 40 | trimSuffix "-") $r.name | trunc 56 | trimSuffix "-" -}}
{{- end -}}

{{/* etcd client URLs, comma-joined, for --etcd. */}}
{{- define "allot.etcd.endpoints" -}}
{{- if .Values.etcd.embedded.enabled -}}
{{- $name := include "allot.etcd.fullname" . -}}
{{- $urls := list -}}
{{- range $i := until (int .Values.etcd.embedded.replicas) -}}
{{- $urls = append $urls (printf "http://%s-%d.%s-headless.%s.svc:2379" $name $i $name $.Release.Namespace) -}}
{{- end -}}
{{- join "," $urls -}}
{{- else -}}
{{- if not .Values.etcd.endpoints -}}
{{- fail "etcd.endpoints is empty: list your etcd cluster's client URLs, or set etcd.embedded.enabled=true" -}}
{{- end -}}
{{- join "," .Values.etcd.endpoints -}}
{{- end -}}
{{- end -}}

{{/* Environment shared by the coordinator and regional pods: etcd and the pod's identity. */}}
{{- define "allot.commonEnv" -}}
- name: POD_NAME
  valueFrom: {fieldRef: {fieldPath: metadata.name}}
- name: POD_IP
  valueFrom: {fieldRef: {fieldPath: status.podIP}}
- name: ALLOT_ETCD
  value: {{ include "allot.etcd.endpoints" . | quote }}
- name: ALLOT_ETCD_PREFIX
  value: {{ .Values.etcd.prefix | quote }}
{{- if .Values.etcd.tls.enabled }}
- name: ALLOT_ETCD_TLS
  value: "true"
- name: ALLOT_ETCD_TLS_CA
  value: /etc/allot/etcd-tls/ca.crt
- name: ALLOT_ETCD_TLS_CERT
  value: /etc/allot/etcd-tls/tls.crt
- name: ALLOT_ETCD_TLS_KEY
  value: /etc/allot/etcd-tls/tls.key
{{- with .Values.etcd.tls.serverName }}
- name: ALLOT_ETCD_TLS_SERVER_NAME
  value: {{ . | quote }}
{{- end }}
{{- end }}
{{- with .Values.etcd.auth.secretName }}
- name: ALLOT_ETCD_USERNAME
  valueFrom: {secretKeyRef: {name: {{ . | quote }}, key: {{ $.Values.etcd.auth.usernameKey | quote }}}}
- name: ALLOT_ETCD_PASSWORD_FILE
  value: /etc/allot/etcd-auth/password
{{- end }}
{{- end -}}

{{/* Server TLS env for a component's tls block. */}}
{{- define "allot.serverTLSEnv" -}}
{{- if .enabled }}
- name: ALLOT_TLS_CERT
  value: /etc/allot/tls/tls.crt
- name: ALLOT_TLS_KEY
  value: /etc/allot/tls/tls.key
{{- if .requireClientCert }}
- name: ALLOT_TLS_CLIENT_CA
  value: /etc/allot/tls/ca.crt
{{- end }}
{{- end }}
{{- end -}}

{{/* GOMEMLIMIT from the container's memory limit, when it has one. */}}
{{- define "allot.gomemlimit" -}}
{{- if and .resources .resources.limits .resources.limits.memory }}
- name: GOMEMLIMIT
  valueFrom:
    resourceFieldRef:
      resource: limits.memory
      divisor: "1"
{{- end }}
{{- end -}}

{{/* Anti-affinity: $mode (hard|soft), $labels (dict). */}}
{{- define "allot.antiAffinity" -}}
{{- $mode := index . 0 -}}{{- $labels := index . 1 -}}
podAntiAffinity:
{{- if eq $mode "hard" }}
  requiredDuringSchedulingIgnoredDuringExecution:
    - topologyKey: kubernetes.io/hostname
      labelSelector:
        matchLabels:
          {{- toYaml $labels | nindent 10 }}
{{- else }}
  preferredDuringSchedulingIgnoredDuringExecution:
    - weight: 100
      podAffinityTerm:
        topologyKey: kubernetes.io/hostname
        labelSelector:
          matchLabels:
            {{- toYaml $labels | nindent 12 }}
{{- end }}
{{- end -}}

{{/* Probes for a component's tls block: /healthz liveness and /readyz
readiness over HTTP(S); with client certificates required the kubelet cannot
pass the handshake, so both fall back to a TCP check of the port. */}}
{{/* Probes on the plaintext ops listener (--ops-listen): real health and
readiness whether or not the API listeners require client certificates. */}}
{{- define "allot.probes" -}}
livenessProbe:
  httpGet: {path: /healthz, port: ops, scheme: HTTP}
  periodSeconds: 10
  timeoutSeconds: 2
  failureThreshold: 3
readinessProbe:
  httpGet: {path: /readyz, port: ops, scheme: HTTP}
  periodSeconds: 5
  timeoutSeconds: 3
  failureThreshold: 3
{{- end -}}

{{- define "allot.reports.secretName" -}}
{{- if .Values.reports.existingSecret -}}{{ .Values.reports.existingSecret }}{{- else -}}{{ include "allot.fullname" . | trunc 55 | trimSuffix "-" }}-reports{{- end -}}
{{- end -}}

{{- define "allot.reports.secretKey" -}}
{{- if .Values.reports.existingSecret -}}{{ .Values.reports.existingSecretKey | default "token" }}{{- else -}}token{{- end -}}
{{- end -}}

{{/* The region token's volume mount and volume (nothing with reports.insecure). */}}
{{- define "allot.reports.mount" -}}
{{- if not .Values.reports.insecure -}}
- name: report-token
  mountPath: /etc/allot/reports
  readOnly: true
{{- end -}}
{{- end -}}
{{- define "allot.reports.volume" -}}
{{- if not .Values.reports.insecure -}}
- name: report-token
  secret:
    secretName: {{ include "allot.reports.secretName" . }}
    items:
      - key: {{ include "allot.reports.secretKey" . }}
        path: token
{{- end -}}
{{- end -}}

{{- define "allot.admin.secretKey" -}}
{{- if .Values.admin.existingSecret -}}{{ .Values.admin.existingSecretKey | default "token" }}{{- else -}}token{{- end -}}
{{- end -}}

{{/* Redis addresses of a region: its own, or the chart's Redis Service. ($root, $region) */}}
{{- define "allot.region.redis" -}}
{{- $root := index . 0 -}}{{- $r := index . 1 -}}
{{- if and $r.redis $r.redis.addresses -}}
{{- $r.redis.addresses -}}
{{- else -}}
{{- printf "%s-redis:6379" (include "allot.region.fullname" (list $root $r)) -}}
{{- end -}}
{{- end -}}
