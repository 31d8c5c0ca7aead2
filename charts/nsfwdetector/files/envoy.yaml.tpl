# The edge (Envoy) of nsfwdetector's cluster mode. Rendered by templates/envoy-configmap.yaml; the local
# stack (`npm run stack`) renders the same file with values-local.yaml. What it guarantees:
# - quota first: every request passes ext_authz (the quota-and-auth service) before any upstream sees
#   it; an unreachable or failing quota service is a 503/5001, never "allowed";
# - client-sent identity headers are stripped before ext_authz, so x-account-id / x-quota-tier reach
#   detect only as the quota service set them;
# - every answer Envoy makes itself is the spec's envelope {code, message} (local_reply_config);
# - bodies stream (no buffering filter: the 50 MiB rule is detect's, 400/4003);
# - only detect requests are retried, on another pod, when the first never got an answer (charged once:
#   ext_authz runs before the router); every cluster has circuit breakers and timeouts;
# - a counted request answered 503 is refunded before that 503 leaves (the Lua filter);
# - slow and idle clients are cut (request headers, idle and stream-idle timeouts, shorter as the edge
#   fills), and load is shed before connections or memory run out (overload_manager; docs/edge.md).
{{- $e := .Values.envoy }}
{{- $up := $e.upstreams }}
{{- /* Keep equal to services/quota/ext-authz.ts (test/e2e/envoy-config.test.ts compares them). */}}
{{- $checkRequestHeaders := list "authorization" "x-device-id" "x-forwarded-for" }}
{{- $upstreamHeaders := list "x-account-id" "x-quota-tier" "x-charge-id" }}
{{- $clientHeadersOnSuccess := list "x-ratelimit-limit" "x-ratelimit-remaining" "x-ratelimit-reset" "x-quota-tier" }}
{{- $clientHeadersOnDeny := concat $clientHeadersOnSuccess (list "retry-after" "content-type") }}
{{- $edgeSecretHeader := list (dict "header" (dict "key" "x-edge-secret" "value" "%ENVIRONMENT(EDGE_SECRET)%") "append_action" "OVERWRITE_IF_EXISTS_OR_ADD") }}
{{- /*
detect's routes: a request whose connection to a detect pod failed, was refused or reset before any
answer is sent again to another pod, as is one a draining pod refused (its 503 carries
x-detect-draining: services/detect/work-gate.ts): the edge may still pick a pod past its drain delay,
when its health checks lag or every pod looks unhealthy (Envoy's panic routing). The router runs after
ext_authz, so the retry is not charged again. A busy pod's 503 (uncharged, refunded by the Lua filter)
is not retried: it goes back to the client with Retry-After, rather than a second wave of load on a
busy tier (docs/kubernetes-ha.md).
*/}}
{{- $drainingHeader := "x-detect-draining" }}
{{- $retry := $up.detect.retry }}
{{- $detectRoute := dict "cluster" "detect" "timeout" $up.detect.routeTimeout }}
{{- if $retry.attempts }}
{{- $_ := set $detectRoute "retry_policy" (dict
      "retry_on" "connect-failure,refused-stream,reset,retriable-headers"
      "retriable_headers" (list (dict "name" $drainingHeader "present_match" true))
      "num_retries" (int $retry.attempts)
      "retry_host_predicate" (list (dict "name" "envoy.retry_host_predicates.previous_hosts" "typed_config" (dict "@type" "type.googleapis.com/envoy.extensions.retry.host.previous_hosts.v3.PreviousHostsPredicate")))
      "host_selection_retry_max_attempts" 5
      "retry_back_off" (dict "base_interval" "0.025s" "max_interval" "0.25s")) }}
{{- end }}
{{- $noExtAuthz := dict "envoy.filters.http.ext_authz" (dict "@type" "type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthzPerRoute" "disabled" true) }}
admin:
  # Loopback only: the admin interface can stop the server and dump its configuration.
  address:
    socket_address: { address: 127.0.0.1, port_value: {{ $e.admin.port }} }
# Load shedding (docs/edge.md). Two pressures: open client connections (of maxDownstreamConnections;
# past it new connections are refused, not queued) and the heap (of overload.maxHeapBytes). As either
# rises, idle connections and requests whose headers or body stall get less time, so that slow
# clients give their slots back to others; near the heap's bound Envoy refuses new connections and
# requests and resets the streams holding the most memory, before the container runs out.
{{- $o := $e.overload }}
overload_manager:
  refresh_interval: {{ $o.refreshInterval }}
  resource_monitors:
    - name: envoy.resource_monitors.global_downstream_max_connections
      typed_config:
        "@type": type.googleapis.com/envoy.extensions.resource_monitors.downstream_connections.v3.DownstreamConnectionsConfig
        max_active_downstream_connections: {{ $e.maxDownstreamConnections }}
    - name: envoy.resource_monitors.fixed_heap
      typed_config:
        "@type": type.googleapis.com/envoy.extensions.resource_monitors.fixed_heap.v3.FixedHeapConfig
        max_heap_size_bytes: {{ int64 $o.maxHeapBytes }}
  actions:
    - name: envoy.overload_actions.reduce_timeouts
      triggers:
        # The connections reach the minimums sooner than the heap: a source that reconnects at once
        # then settles at half the bound (docs/edge.md), while large uploads filling the heap do not
        # cut slow legitimate ones that early.
        - name: envoy.resource_monitors.global_downstream_max_connections
          scaled: { scaling_threshold: {{ $o.scaleTimeoutsFrom }}, saturation_threshold: {{ $o.connectionsScaleTimeoutsFully }} }
        - name: envoy.resource_monitors.fixed_heap
          scaled: { scaling_threshold: {{ $o.scaleTimeoutsFrom }}, saturation_threshold: {{ $o.scaleTimeoutsFully }} }
      typed_config:
        "@type": type.googleapis.com/envoy.config.overload.v3.ScaleTimersOverloadActionConfig
        timer_scale_factors:
          # A connection with no request in flight (idleTimeout), including one that has sent nothing.
          - timer: HTTP_DOWNSTREAM_CONNECTION_IDLE
            min_timeout: {{ $o.minIdleTimeout }}
          # A request that sends nothing for this long, its headers included (streamIdleTimeout).
          - timer: HTTP_DOWNSTREAM_STREAM_IDLE
            min_timeout: {{ $o.minStreamIdleTimeout }}
    - name: envoy.overload_actions.disable_http_keepalive
      triggers:
        - name: envoy.resource_monitors.fixed_heap
          threshold: { value: {{ $o.heap.disableKeepalive }} }
    - name: envoy.overload_actions.shrink_heap
      triggers:
        - name: envoy.resource_monitors.fixed_heap
          threshold: { value: {{ $o.heap.shrink }} }
    - name: envoy.overload_actions.reset_high_memory_stream
      triggers:
        - name: envoy.resource_monitors.fixed_heap
          scaled: { scaling_threshold: {{ $o.heap.shrink }}, saturation_threshold: {{ $o.heap.stopAcceptingRequests }} }
    - name: envoy.overload_actions.stop_accepting_requests
      triggers:
        - name: envoy.resource_monitors.fixed_heap
          threshold: { value: {{ $o.heap.stopAcceptingRequests }} }
  loadshed_points:
    - name: envoy.load_shed_points.tcp_listener_accept
      triggers:
        - name: envoy.resource_monitors.fixed_heap
          threshold: { value: {{ $o.heap.stopAcceptingConnections }} }
  # Streams' buffers are accounted (from 1 MiB each), so that reset_high_memory_stream can find them.
  buffer_factory_config:
    minimum_account_to_track_power_of_two: 20
static_resources:
  listeners:
    - name: edge
      address:
        socket_address: { address: {{ $e.listener.address | quote }}, port_value: {{ $e.listener.port }} }
      filter_chains:
        - filters:
{{- if include "nsfwdetector.sourceConnectionLimitOn" $ }}
{{- $scl := $e.sourceConnectionLimit }}
            # One source holds at most maxConnections open connections (docs/edge.md): a Wasm filter
            # (edge/source-connection-limit) counts them per source across the workers, and closes a
            # new connection from a source at its bound before a byte is read; a connection releases
            # its count when it closes, whoever closes it. Should the filter fail, connections are let
            # in (the global bound and the timeouts still hold).
            - name: envoy.filters.network.wasm
              typed_config:
                "@type": type.googleapis.com/envoy.extensions.filters.network.wasm.v3.Wasm
                config:
                  name: source_connection_limit
                  root_id: source_connection_limit
                  failure_policy: FAIL_OPEN
                  configuration:
                    "@type": type.googleapis.com/google.protobuf.StringValue
                    value: {{ printf "max_connections=%d ipv6_prefix_bits=%d buckets=%d" (int $scl.maxConnections) (int $scl.ipv6PrefixBits) (int $scl.buckets) | quote }}
                  vm_config:
                    # Every worker's VM shares the counts (shared data is per vm_id).
                    vm_id: source_connection_limit
                    runtime: envoy.wasm.runtime.v8
                    code:
                      local:
                        filename: {{ $scl.filename | quote }}
{{- end }}
{{- if include "nsfwdetector.sourceLimitOn" $ }}
            # One source may open only so many connections a second (docs/edge.md): before a byte is
            # read, the quota sidecar is asked with the peer's address; a refused connection is closed
            # at once. Envoy has no per-source connection count of its own (connection_limit and
            # local_ratelimit count every source together). No answer in time, or no sidecar: let in.
            - name: envoy.filters.network.ratelimit
              typed_config:
                "@type": type.googleapis.com/envoy.extensions.filters.network.ratelimit.v3.RateLimit
                stat_prefix: source
                domain: edge
                descriptors:
                  - entries:
                      - { key: source, value: "%DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT%" }
                timeout: {{ $e.sourceLimit.timeout }}
                failure_mode_deny: false
                rate_limit_service:
                  transport_api_version: V3
                  grpc_service:
                    envoy_grpc: { cluster_name: source_limit }
{{- end }}
            - name: envoy.filters.network.http_connection_manager
              typed_config:
                "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
                stat_prefix: edge
                # The client is the socket peer, appended to X-Forwarded-For; a client's own
                # X-Forwarded-For entries are never trusted beyond the load balancers declared here.
                use_remote_address: true
                xff_num_trusted_hops: {{ $e.xffNumTrustedHops }}
                generate_request_id: true
                stream_idle_timeout: {{ $e.streamIdleTimeout }}
                # A slow client (one header byte now and then) holds its connection at most this long
                # before its request line and headers are complete.
                request_headers_timeout: {{ $e.requestHeadersTimeout }}
                # The services' framing limits (lib/common/http-limits.ts): what passes here is never
                # refused by a service for its headers after ext_authz has counted it.
                max_request_headers_kb: {{ include "nsfwdetector.edgeMaxRequestHeadersKb" $ }}
                common_http_protocol_options:
                  max_headers_count: {{ include "nsfwdetector.edgeMaxRequestHeaders" $ }}
                  # A connection with no request in flight, including one that never sends a byte.
                  idle_timeout: {{ $e.idleTimeout }}
                # HTTP/1.0 is served, as the services serve it.
                http_protocol_options:
                  accept_http_10: true
                # Answers look as the embedded server's do: no "server: envoy".
                server_header_transformation: PASS_THROUGH
                tracing:
                  random_sampling: { value: {{ $e.tracing.samplingPercent }} }
                  provider:
                    name: envoy.tracers.opentelemetry
                    typed_config:
                      "@type": type.googleapis.com/envoy.config.trace.v3.OpenTelemetryConfig
                      service_name: nsfwdetector-edge
                      http_service:
                        http_uri:
                          uri: "http://{{ $e.tracing.collector.address }}:{{ $e.tracing.collector.port }}/v1/traces"
                          cluster: trace_collector
                          timeout: 1s
                access_log:
                  - name: envoy.access_loggers.stdout
                    typed_config:
                      "@type": type.googleapis.com/envoy.extensions.access_loggers.stream.v3.StdoutAccessLog
                      log_format:
                        json_format:
                          time: "%START_TIME%"
                          trace_id: "%TRACE_ID%"
                          request_id: "%REQ(X-REQUEST-ID)%"
                          method: "%REQ(:METHOD)%"
                          path: "%REQ(:PATH)%"
                          status: "%RESPONSE_CODE%"
                          flags: "%RESPONSE_FLAGS%"
                          details: "%RESPONSE_CODE_DETAILS%"
                          upstream: "%UPSTREAM_CLUSTER%"
                          client: "%DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT%"
                          bytes_received: "%BYTES_RECEIVED%"
                          bytes_sent: "%BYTES_SENT%"
                          duration_ms: "%DURATION%"
                # Replies Envoy makes itself, in the spec's envelope. The first matching mapper wins.
                local_reply_config:
                  mappers:
                    # The quota service's own refusals (401/4011, 429/4290/4291) pass untouched, with
                    # its body, Retry-After and X-RateLimit-* headers.
                    - filter:
                        and_filter:
                          filters:
                            - response_flag_filter: { flags: [UAEX] }
                            - status_code_filter:
                                comparison: { op: LE, value: { default_value: 499, runtime_key: nsfwdetector.local_reply.deny_max } }
                    - filter:
                        status_code_filter:
                          comparison: { op: EQ, value: { default_value: 413, runtime_key: nsfwdetector.local_reply.too_large } }
                      status_code: 400
                      body_format_override:
                        text_format_source: { inline_string: {{ include "nsfwdetector.fileTooLargeBody" $ | squote }} }
                        content_type: application/json
                    # Requests Envoy's codec refuses, before ext_authz (never counted): headers too
                    # large or too many; malformed framing such as an invalid Transfer-Encoding, which
                    # it answers 501 (a 400 for the client, not a "try again").
                    - filter:
                        status_code_filter:
                          comparison: { op: EQ, value: { default_value: 431, runtime_key: nsfwdetector.local_reply.headers_too_large } }
                      body_format_override:
                        text_format_source: { inline_string: '{"code":4310,"message":"Request header fields too large"}' }
                        content_type: application/json
                    - filter:
                        status_code_filter:
                          comparison: { op: EQ, value: { default_value: 501, runtime_key: nsfwdetector.local_reply.not_implemented } }
                      status_code: 400
                      body_format_override:
                        text_format_source: { inline_string: '{"code":4001,"message":"Bad request"}' }
                        content_type: application/json
                    - filter:
                        status_code_filter:
                          comparison: { op: EQ, value: { default_value: 408, runtime_key: nsfwdetector.local_reply.timeout } }
                      body_format_override:
                        text_format_source: { inline_string: '{"code":4080,"message":"Request timeout: the request did not arrive in time"}' }
                        content_type: application/json
                    - filter:
                        response_flag_filter: { flags: [NR] }
                      status_code: 404
                      body_format_override:
                        text_format_source: { inline_string: '{"code":4040,"message":"Not found"}' }
                        content_type: application/json
                    # Upstream down, refusing, overflowing or timing out; ext_authz unreachable or failing.
                    - filter:
                        status_code_filter:
                          comparison: { op: GE, value: { default_value: 500, runtime_key: nsfwdetector.local_reply.unavailable } }
                      status_code: 503
                      headers_to_add:
                        - header: { key: retry-after, value: {{ $e.retryAfterSeconds | quote }} }
                          append_action: OVERWRITE_IF_EXISTS_OR_ADD
                      body_format_override:
                        text_format_source: { inline_string: '{"code":5001,"message":"Service temporarily unavailable; treat as unknown, not safe"}' }
                        content_type: application/json
                    # Anything else Envoy refuses (a malformed request, an upgrade, ...): 400/4001.
                    - filter:
                        status_code_filter:
                          comparison: { op: GE, value: { default_value: 400, runtime_key: nsfwdetector.local_reply.bad_request } }
                      status_code: 400
                      body_format_override:
                        text_format_source: { inline_string: '{"code":4001,"message":"Bad request"}' }
                        content_type: application/json
                route_config:
                  name: edge
                  virtual_hosts:
                    - name: nsfwdetector
                      domains: ["*"]
                      routes:
                        # x-edge-secret: the detect server's EDGE_SECRET, from Envoy's own environment
                        # (a Secret in the pod, never this ConfigMap); it replaces any client-sent copy.
{{- range list "/api/public/detect" "/api/open/detect" }}
                        - match: { path: {{ . }} }
                          route: {{ $detectRoute | toJson }}
                          request_headers_to_add: {{ $edgeSecretHeader | toJson }}
                          response_headers_to_remove: [{{ $drainingHeader }}]
{{- if $retry.attempts }}
                          # The retry keeps the body: up to this much (docs/kubernetes-ha.md).
                          request_body_buffer_limit: {{ int64 $retry.bufferBytes }}
{{- end }}
{{- end }}
                        - match: { path: /api/public/health }
                          route: { cluster: health, timeout: {{ $up.health.routeTimeout }} }
                          typed_per_filter_config: {{ $noExtAuthz | toJson }}
                        - match: { path: /openapi.json }
                          route: { cluster: health, timeout: {{ $up.health.routeTimeout }} }
                          typed_per_filter_config: {{ $noExtAuthz | toJson }}
                        - match: { path: /docs/api }
                          route: { cluster: health, timeout: {{ $up.health.routeTimeout }} }
                          typed_per_filter_config: {{ $noExtAuthz | toJson }}
                        - match: { prefix: /docs/api/ }
                          route: { cluster: health, timeout: {{ $up.health.routeTimeout }} }
                          typed_per_filter_config: {{ $noExtAuthz | toJson }}
                        - match: { path: /docs/skill.md }
                          route: { cluster: health, timeout: {{ $up.health.routeTimeout }} }
                          typed_per_filter_config: {{ $noExtAuthz | toJson }}
                        - match: { prefix: /skill/ }
                          route: { cluster: health, timeout: {{ $up.health.routeTimeout }} }
                          typed_per_filter_config: {{ $noExtAuthz | toJson }}
                        # The console (pages and /console/api/*) is served by the quota service.
                        - match: { path: /console }
                          route: { cluster: quota, timeout: {{ $up.quota.routeTimeout }} }
                          typed_per_filter_config: {{ $noExtAuthz | toJson }}
                        - match: { prefix: /console/ }
                          route: { cluster: quota, timeout: {{ $up.quota.routeTimeout }} }
                          typed_per_filter_config: {{ $noExtAuthz | toJson }}
                http_filters:
                  # A client must not pose as an account: its own copies of the identity headers go
                  # before ext_authz sets them.
                  - name: envoy.filters.http.header_mutation
                    typed_config:
                      "@type": type.googleapis.com/envoy.extensions.filters.http.header_mutation.v3.HeaderMutation
                      mutations:
                        request_mutations:
{{- range $upstreamHeaders }}
                          - remove: {{ . | quote }}
{{- end }}
                  - name: envoy.filters.http.ext_authz
                    typed_config:
                      "@type": type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthz
                      transport_api_version: V3
                      failure_mode_allow: false
                      status_on_error: { code: ServiceUnavailable }
                      # No with_request_body: the upload streams to detect, never buffered here.
                      allowed_headers:
                        {{- include "nsfwdetector.headerPatterns" $checkRequestHeaders | nindent 24 }}
                      http_service:
                        server_uri:
                          uri: "http://{{ $up.quota.address }}:{{ $up.quota.port }}"
                          cluster: quota
                          timeout: {{ $e.extAuthzTimeout }}
                        path_prefix: /ext_authz
                        authorization_response:
                          allowed_upstream_headers:
                            {{- include "nsfwdetector.headerPatterns" $upstreamHeaders | nindent 28 }}
                          allowed_client_headers:
                            {{- include "nsfwdetector.headerPatterns" $clientHeadersOnDeny | nindent 28 }}
                          allowed_client_headers_on_success:
                            {{- include "nsfwdetector.headerPatterns" $clientHeadersOnSuccess | nindent 28 }}
                  # A body declared longer than detect would ever read is refused here (413, answered
                  # as 400/4003 by the mapper above) without reading it, after ext_authz so it counts as
                  # in the embedded server. Smaller bodies, and bodies of unknown length, stream on:
                  # detect applies the 50 MiB rule itself and reads a refused body to its end before
                  # answering, so that the answer is not lost to a reset.
                  - name: envoy.filters.http.lua
                    typed_config:
                      "@type": type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua
                      default_source_code:
                        inline_string: |
                          function envoy_on_request(handle)
                            local length = tonumber(handle:headers():get("content-length"))
                            if length ~= nil and length > {{ include "nsfwdetector.edgeMaxRequestBytes" $ }} then
                              handle:respond({[":status"] = "413"}, "")
                              return
                            end
                            -- The charge ext_authz made for this request (a client's own copy was
                            -- stripped before ext_authz), kept for the answer.
                            local charge = handle:headers():get("x-charge-id")
                            if charge ~= nil then
                              handle:streamInfo():dynamicMetadata():set("nsfwdetector.charge", "id", charge)
                            end
                          end
                          -- A counted request answered 503 (detect busy, draining or gone) is not
                          -- charged: the quota sidecar takes the charge back, as the embedded server does.
                          -- The 503 waits for the refund (the sidecar is on this pod: a millisecond), so
                          -- that no answer leaves while its refund could still be lost with this gateway;
                          -- a failed refund (the sidecar or its store: not 204) is asked once more, which
                          -- is safe (idempotent per charge id), then logged with the charge id (a refund
                          -- that timed out may still be applied by the store later).
                          function envoy_on_response(handle)
                            if handle:headers():get(":status") ~= "503" then return end
                            local meta = handle:streamInfo():dynamicMetadata():get("nsfwdetector.charge")
                            if meta == nil or meta["id"] == nil then return end
                            local status
                            for _ = 1, 2 do
                              local headers = handle:httpCall("quota", {
                                [":method"] = "POST",
                                [":path"] = "/ext_authz-refund/" .. meta["id"],
                                [":authority"] = "quota",
                                ["content-length"] = "0",
                              }, "", {{ int $e.refundTimeoutMs }})
                              status = headers[":status"]
                              if status == "204" then return end
                            end
                            handle:logErr("nsfwdetector: the refund of charge " .. meta["id"] ..
                              " failed twice (last status " .. tostring(status) .. "): this 503 may stay charged")
                          end
                  - name: envoy.filters.http.router
                    typed_config:
                      "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
                      suppress_envoy_headers: true
  clusters:
    {{- include "nsfwdetector.envoyCluster" (dict "name" "detect" "upstream" $up.detect "address" (include "nsfwdetector.upstreamAddress" (dict "root" $ "name" "detect"))) | nindent 4 }}
    {{- include "nsfwdetector.envoyCluster" (dict "name" "health" "upstream" $up.health "address" (include "nsfwdetector.upstreamAddress" (dict "root" $ "name" "health"))) | nindent 4 }}
    {{- include "nsfwdetector.envoyCluster" (dict "name" "quota" "upstream" $up.quota) | nindent 4 }}
    {{- include "nsfwdetector.envoyCluster" (dict "name" "trace_collector" "upstream" $e.tracing.collector) | nindent 4 }}
{{- if include "nsfwdetector.sourceLimitOn" $ }}
    # The quota sidecar's rate-limit service (gRPC: HTTP/2 without TLS, on loopback).
    - name: source_limit
      type: STATIC
      connect_timeout: 0.25s
      typed_extension_protocol_options:
        envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
          "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
          # Calls the edge gives up on (the timeout) are reset: thousands a second under a flood, which
          # Envoy's default flood protection (1,000 queued control frames) would answer by closing the
          # connection, and every call in flight with it. This peer is our own sidecar on loopback.
          explicit_http_config:
            http2_protocol_options: { max_outbound_frames: 1000000, max_outbound_control_frames: 1000000 }
      # One call per new client connection: an attacker's reconnecting slots are all in flight at once.
      # Past these (or the timeout) a connection is let in, as with the sidecar down.
      circuit_breakers:
        thresholds:
          - { priority: DEFAULT, max_connections: 4, max_pending_requests: 16384, max_requests: 16384, max_retries: 0 }
      load_assignment:
        cluster_name: source_limit
        endpoints:
          - lb_endpoints:
              - endpoint: { address: { socket_address: { address: {{ $up.quota.address | quote }}, port_value: {{ $e.sourceLimit.port }} } } }
{{- end }}
