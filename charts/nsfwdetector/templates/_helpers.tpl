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
An Envoy cluster: STATIC for an IP address, STRICT_DNS for a name (a Kubernetes Service; a headless
one gives a host per ready pod). `address` overrides the upstream's own (detect and health: their
Service, nsfwdetector.upstreamAddress). An upstream's `dnsRefreshRate`, `retry`, `healthCheck` and
`outlierDetection` values (detect's) add those parts.
*/}}
{{- /*
"true" when the edge asks the quota sidecar about every new client connection (envoy.sourceLimit): only
when Envoy's socket peer is the client (xffNumTrustedHops 0); behind a load balancer it would count the
balancer.
*/}}
{{- define "nsfwdetector.sourceLimitOn" -}}
{{- if and .Values.envoy.sourceLimit.enabled (eq (int .Values.envoy.xffNumTrustedHops) 0) }}true{{ end }}
{{- end -}}

{{- /*
"true" when the edge bounds the connections one source holds (envoy.sourceConnectionLimit, a Wasm
network filter): the same rule, it counts the socket's peer.
*/}}
{{- define "nsfwdetector.sourceConnectionLimitOn" -}}
{{- if and .Values.envoy.sourceConnectionLimit.enabled (eq (int .Values.envoy.xffNumTrustedHops) 0) }}true{{ end }}
{{- end -}}

{{- define "nsfwdetector.envoyCluster" -}}
{{- $u := .upstream -}}
{{- $address := .address | default $u.address -}}
- name: {{ .name }}
  {{- if regexMatch "^[0-9.]+$" (toString $address) }}
  type: STATIC
  {{- else if $u.dnsRefreshRate }}
  # STRICT_DNS (a host per address) with its own lookup rate: pods come and go.
  cluster_type:
    name: envoy.cluster.dns
    typed_config:
      "@type": type.googleapis.com/envoy.extensions.clusters.dns.v3.DnsCluster
      dns_refresh_rate: {{ $u.dnsRefreshRate }}
      respect_dns_ttl: false
  {{- else }}
  type: STRICT_DNS
  {{- end }}
  connect_timeout: {{ $u.connectTimeout | default "1s" }}
  typed_extension_protocol_options:
    envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
      "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
      explicit_http_config: { http_protocol_options: {} }
      # Idle upstream connections are let go of soon: a service draining on SIGTERM waits for its
      # open connections, and Envoy would otherwise keep them for an hour.
      common_http_protocol_options: { idle_timeout: {{ $u.idleTimeout | default "2s" }} }
  {{- if $u.healthCheck }}
  # A pod gone from the Service leaves the balancing at once, whatever its last health check said.
  ignore_health_on_host_removal: true
  # A request sent to a pod whose node vanished waits on a connection nobody will close (no RST ever
  # comes). Once everything sent was acknowledged, TCP keepalive finds the peer dead ~6 s after its last
  # byte (3 s idle, then 3 probes 1 s apart). While some of the request is still unacknowledged
  # (its body on its way) keepalive never probes and the kernel retransmits for ~15 minutes:
  # TCP_USER_TIMEOUT closes such a connection once its data has gone unacknowledged for tcpUserTimeoutMs.
  # Either way the request, reset before any answer, is retried on another pod (docs/kubernetes-ha.md).
  upstream_connection_options:
    tcp_keepalive: { keepalive_time: 3, keepalive_interval: 1, keepalive_probes: 3 }
  {{- with $u.tcpUserTimeoutMs }}
  # Only a peer whose kernel stops acknowledging is cut: a busy pod, a slow answer or a slowly read
  # upload (its zero-window probes are answered) are not, nor a draining pod finishing its requests.
  # Hence not per_try_idle_timeout (it would cut a slow answer) nor close_connections_on_host_health_failure
  # (a draining pod fails its health checks on purpose: its requests above the retry buffer would be
  # 503s). Set on every socket to this cluster (no source address: the kernel picks it, as without).
  upstream_bind_config:
    socket_options:
      - { description: TCP_USER_TIMEOUT, level: 6, name: 18, int_value: {{ int64 . }}, state: STATE_PREBIND }
  {{- end }}
  {{- end }}
  circuit_breakers:
    thresholds:
      - priority: DEFAULT
        max_connections: {{ $u.maxConnections | default 1024 }}
        max_pending_requests: {{ $u.maxPendingRequests | default 256 }}
        max_requests: {{ $u.maxRequests | default 1024 }}
        {{- if $u.retry }}
        # Retries (detect's routes) are bounded by a share of the requests in flight, so that a sick
        # cluster is not sent twice the load.
        retry_budget:
          budget_percent: { value: {{ $u.retry.budgetPercent }} }
          min_retry_concurrency: {{ $u.retry.minConcurrency }}
        {{- else }}
        # Nothing is retried on this cluster.
        max_retries: 0
        {{- end }}
  {{- with $u.healthCheck }}
  # Every endpoint is checked on its readiness route: one that stops answering, or says it is
  # draining (503), leaves the balancing within interval × unhealthy_threshold. Requests in flight on it
  # go on (a draining pod answers them).
  health_checks:
    - timeout: {{ .timeout }}
      interval: {{ .interval }}
      no_traffic_interval: {{ .interval }}
      unhealthy_threshold: {{ .unhealthyThreshold }}
      healthy_threshold: {{ .healthyThreshold }}
      http_health_check: { path: /internal/ready }
  {{- end }}
  {{- with $u.outlierDetection }}
  # An endpoint whose connections fail (refused, reset, timed out: a lost pod or node) is ejected at
  # once; the upstream's own 5xx answers (detect's 503 when busy) eject nothing.
  outlier_detection:
    split_external_local_origin_errors: true
    consecutive_local_origin_failure: {{ .consecutiveLocalOriginFailures }}
    enforcing_consecutive_local_origin_failure: 100
    enforcing_consecutive_5xx: 0
    enforcing_consecutive_gateway_failure: 0
    enforcing_success_rate: 0
    enforcing_local_origin_success_rate: 0
    interval: {{ .interval }}
    base_ejection_time: {{ .baseEjectionTime }}
    max_ejection_percent: {{ .maxEjectionPercent }}
  {{- end }}
  load_assignment:
    cluster_name: {{ .name }}
    endpoints:
      - lb_endpoints:
          - endpoint:
              address:
                socket_address: { address: {{ $address | quote }}, port_value: {{ $u.port }} }
{{- end -}}
