{{/* Common names and labels. */}}
{{- define "nsfwdetector.fullname" -}}
{{- .Values.fullnameOverride | default .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "nsfwdetector.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/*
Header name matchers for Envoy's ext_authz lists (exact, case-insensitive). Keep the lists in
files/envoy.yaml.tpl equal to the exports of services/quota/ext-authz.ts: test/e2e/envoy-config.test.ts
compares them.
*/}}
{{- define "nsfwdetector.headerPatterns" -}}
patterns:
{{- range . }}
  - exact: {{ . | quote }}
    ignore_case: true
{{- end }}
{{- end -}}

{{/*
An Envoy cluster: STATIC for an IP address, STRICT_DNS for a name (a Kubernetes Service). `address`
overrides the upstream's own (detect and health: their Service, nsfwdetector.upstreamService).
*/}}
{{- define "nsfwdetector.envoyCluster" -}}
{{- $u := .upstream -}}
{{- $address := .address | default $u.address -}}
- name: {{ .name }}
  type: {{ if regexMatch "^[0-9.]+$" (toString $address) }}STATIC{{ else }}STRICT_DNS{{ end }}
  connect_timeout: {{ $u.connectTimeout | default "1s" }}
  typed_extension_protocol_options:
    envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
      "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
      explicit_http_config: { http_protocol_options: {} }
      # Idle upstream connections are let go of soon: a service draining on SIGTERM waits for its
      # open connections, and Envoy would otherwise keep them for an hour.
      common_http_protocol_options: { idle_timeout: {{ $u.idleTimeout | default "2s" }} }
  circuit_breakers:
    thresholds:
      - priority: DEFAULT
        max_connections: {{ $u.maxConnections | default 1024 }}
        max_pending_requests: {{ $u.maxPendingRequests | default 256 }}
        max_requests: {{ $u.maxRequests | default 1024 }}
        # Nothing is ever retried (a POST is an upload and counts against a quota).
        max_retries: 0
  load_assignment:
    cluster_name: {{ .name }}
    endpoints:
      - lb_endpoints:
          - endpoint:
              address:
                socket_address: { address: {{ $address | quote }}, port_value: {{ $u.port }} }
{{- end -}}
