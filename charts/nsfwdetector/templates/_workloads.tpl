{{/* Helpers of the workload templates (the Envoy helpers are in _helpers.tpl). */}}

{{/* Prefix of every object's name. */}}
{{- define "nsfwdetector.prefix" -}}
{{- include "nsfwdetector.fullname" . | trunc 40 | trimSuffix "-" -}}
{{- end -}}

{{/* Selector labels of one component: (dict "root" $ "component" "detect"). */}}
{{- define "nsfwdetector.selectorLabels" -}}
app.kubernetes.io/name: {{ .root.Chart.Name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* All labels of one component's objects. */}}
{{- define "nsfwdetector.componentLabels" -}}
{{ include "nsfwdetector.labels" .root }}
app.kubernetes.io/component: {{ .component }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version }}
{{- end -}}

{{/* The service image, by digest when one is given. */}}
{{- define "nsfwdetector.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag }}
{{- end -}}
{{- end -}}

{{/*
The Service that Envoy dials for an upstream is named by the Envoy value itself
(envoy.upstreams.<name>.address), so the edge configuration and the Services cannot disagree. Empty
(the default) or an IP address (values-local.yaml: the local stack on loopback): <prefix>-<name>, the
release's own.
*/}}
{{- define "nsfwdetector.upstreamService" -}}
{{- $address := toString (index .root.Values.envoy.upstreams .name).address -}}
{{- if or (eq $address "") (regexMatch "^[0-9.]+$" $address) -}}
{{- printf "%s-%s" (include "nsfwdetector.prefix" .root) .name -}}
{{- else -}}
{{- $address -}}
{{- end -}}
{{- end -}}

{{/* Pod-level security: Pod Security "restricted". */}}
{{- define "nsfwdetector.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: {{ .uid }}
runAsGroup: {{ .uid }}
fsGroup: {{ .uid }}
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* Container-level security: Pod Security "restricted", read-only root filesystem. */}}
{{- define "nsfwdetector.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
capabilities:
  drop: [ALL]
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/*
Spread a component's pods across nodes: at most one more on a node than on any other, counting only
nodes a pod may go to (a cordoned, drained or lost node is tainted, so it is not a domain that would
hold the skew at zero), and, among equal choices, never beside one of its own.
*/}}
{{- define "nsfwdetector.topologySpread" -}}
topologySpreadConstraints:
  - maxSkew: 1
    topologyKey: kubernetes.io/hostname
    whenUnsatisfiable: {{ .root.Values.topologySpread }}
    nodeTaintsPolicy: Honor
    labelSelector:
      matchLabels:
        {{- include "nsfwdetector.selectorLabels" . | nindent 8 }}
affinity:
  podAntiAffinity:
    preferredDuringSchedulingIgnoredDuringExecution:
      - weight: 100
        podAffinityTerm:
          topologyKey: kubernetes.io/hostname
          labelSelector:
            matchLabels:
              {{- include "nsfwdetector.selectorLabels" . | nindent 14 }}
{{- end -}}

{{/*
A stateless pod on a node that stopped answering (not-ready, unreachable) is evicted this long after
the node controller notices, instead of Kubernetes' 300 s: its replacement starts elsewhere in seconds.
*/}}
{{- define "nsfwdetector.nodeLossTolerations" -}}
tolerations:
{{- range list "node.kubernetes.io/not-ready" "node.kubernetes.io/unreachable" }}
  - { key: {{ . }}, operator: Exists, effect: NoExecute, tolerationSeconds: {{ int64 $.Values.nodeLossTolerationSeconds }} }
{{- end }}
{{- end -}}

{{/* Name of the Secret and key holding the Redis password; empty name: no password. */}}
{{- define "nsfwdetector.redisSecretName" -}}
{{- if .Values.redis.existingSecret -}}
{{ .Values.redis.existingSecret }}
{{- else if .Values.redis.enabled -}}
{{ include "nsfwdetector.prefix" . }}-redis
{{- end -}}
{{- end -}}

{{- define "nsfwdetector.redisSecretKey" -}}
{{- if .Values.redis.existingSecret -}}{{ .Values.redis.existingSecretKey }}{{- else -}}redis-password{{- end -}}
{{- end -}}

{{/*
The Redis the stores use (lib/common/redis-target.ts): REDIS_URL for the in-chart Redis or an
external one (the password from its Secret spliced into the URL by Kubernetes' $(VAR) expansion;
generated passwords are alphanumeric, so URL-safe), or REDIS_SENTINELS + REDIS_SENTINEL_MASTER, or
REDIS_CLUSTER_NODES, with REDIS_PASSWORD read by the service itself.
*/}}
{{- define "nsfwdetector.redisEnv" -}}
{{- $secret := include "nsfwdetector.redisSecretName" . -}}
{{- $ext := .Values.redis.external -}}
{{- $url := "" -}}
{{- if and .Values.redis.enabled (eq .Values.redis.architecture "sentinel") -}}
{{- $ext = dict "url" "" "sentinel" (dict "addresses" (splitList "," (include "nsfwdetector.redisSentinelNodes" (dict "root" . "format" "[%s]:26379"))) "masterName" .Values.redis.sentinel.masterName "existingSecret" $secret "existingSecretKey" (include "nsfwdetector.redisSecretKey" .)) "cluster" (dict "nodes" list) "waitReplicas" nil -}}
{{- else if .Values.redis.enabled -}}
{{- $url = printf "redis://%s-redis:6379/0" (include "nsfwdetector.prefix" .) -}}
{{- else if and (not $ext.url) (or $ext.sentinel.addresses $ext.cluster.nodes) -}}
{{- else -}}
{{- $url = required "redis.external.url, redis.external.sentinel or redis.external.cluster is required when redis.enabled is false" $ext.url -}}
{{- end -}}
{{- if $secret }}
- name: REDIS_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ $secret }}
      key: {{ include "nsfwdetector.redisSecretKey" . }}
{{- end }}
{{- if $url }}
- name: REDIS_URL
  value: {{ ternary (regexReplaceAll "^(rediss?://)" $url "${1}:$(REDIS_PASSWORD)@") $url (ne $secret "") | quote }}
{{- else if $ext.sentinel.addresses }}
- name: REDIS_SENTINELS
  value: {{ join "," $ext.sentinel.addresses | quote }}
- name: REDIS_SENTINEL_MASTER
  value: {{ $ext.sentinel.masterName | quote }}
{{- with $ext.sentinel.existingSecret }}
- name: REDIS_SENTINEL_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ . }}
      key: {{ $ext.sentinel.existingSecretKey }}
{{- end }}
{{- else }}
- name: REDIS_CLUSTER_NODES
  value: {{ join "," $ext.cluster.nodes | quote }}
{{- end }}
{{- if and (not .Values.redis.enabled) (ne $ext.waitReplicas nil) }}
- name: REDIS_WAIT_REPLICAS
  value: {{ $ext.waitReplicas | int | quote }}
{{- end }}
{{- end -}}

{{/* The product configuration every service reads (lib/common/config.ts validates it at boot). */}}
{{- define "nsfwdetector.configEnv" -}}
{{- $c := .Values.config -}}
- { name: NODE_ENV, value: production }
- { name: HOST, value: "0.0.0.0" }
{{- /* Generated from lib/common/settings.ts by `npm run settings`: one per `config` value. */}}
{{- if ge (float64 $c.thresholdAllow) (float64 $c.thresholdBlock) }}
{{- fail (printf "config.thresholdAllow must be less than config.thresholdBlock (the review band lies between them), got %v and %v" (float64 $c.thresholdAllow) (float64 $c.thresholdBlock)) }}
{{- end }}
{{- if ge (int64 $c.shutdownDelayMs) (int64 $c.shutdownGraceMs) }}
{{- fail (printf "config.shutdownDelayMs must be less than config.shutdownGraceMs (the drain is part of the grace period), got %d and %d" (int64 $c.shutdownDelayMs) (int64 $c.shutdownGraceMs)) }}
{{- end }}
- { name: THRESHOLD_ALLOW, value: {{ $c.thresholdAllow | quote }} }
- { name: THRESHOLD_BLOCK, value: {{ $c.thresholdBlock | quote }} }
- { name: MODEL, value: {{ $c.model | quote }} }
- { name: ANON_PER_MINUTE, value: {{ $c.anonPerMinute | int64 | quote }} }
- { name: ANON_PER_DAY, value: {{ $c.anonPerDay | int64 | quote }} }
- { name: FREE_PER_MINUTE, value: {{ $c.freePerMinute | int64 | quote }} }
- { name: FREE_PER_DAY, value: {{ $c.freePerDay | int64 | quote }} }
- { name: PRO_PER_MINUTE, value: {{ $c.proPerMinute | int64 | quote }} }
- { name: PRO_PER_DAY, value: {{ $c.proPerDay | int64 | quote }} }
- { name: MAX_FILE_BYTES, value: {{ $c.maxFileBytes | int64 | quote }} }
- { name: UPLOAD_IDLE_TIMEOUT_MS, value: {{ $c.uploadIdleTimeoutMs | int64 | quote }} }
- { name: MAX_ACTIVE_IMAGES, value: {{ $c.maxActiveImages | int64 | quote }} }
- { name: MAX_UPLOADS, value: {{ $c.maxUploads | int64 | quote }} }
- { name: MAX_UPLOADS_PER_CLIENT, value: {{ $c.maxUploadsPerClient | int64 | quote }} }
- { name: MAX_UPLOAD_BYTES_IN_PROGRESS, value: {{ $c.maxUploadBytesInProgress | int64 | quote }} }
- { name: OVERLOAD_RETRY_AFTER_SECONDS, value: {{ $c.overloadRetryAfterSeconds | int64 | quote }} }
- { name: SCORING_WORKERS, value: {{ $c.scoringWorkers | int64 | quote }} }
- { name: INFERENCE_THREADS, value: {{ $c.inferenceThreads | int64 | quote }} }
- { name: MAX_FRAMES_SCORED, value: {{ $c.maxFramesScored | int64 | quote }} }
- { name: PDQ_HASHES, value: {{ $c.pdqHashes | quote }} }
- { name: LOG_LEVEL, value: {{ $c.logLevel | quote }} }
- { name: SHUTDOWN_GRACE_MS, value: {{ $c.shutdownGraceMs | int64 | quote }} }
- { name: SHUTDOWN_DELAY_MS, value: {{ $c.shutdownDelayMs | int64 | quote }} }
- { name: REDIS_KEY_PREFIX, value: {{ $c.redisKeyPrefix | quote }} }
- { name: REDIS_COMMAND_TIMEOUT_MS, value: {{ $c.redisCommandTimeoutMs | int64 | quote }} }
- { name: SOURCE_CONNECTIONS_PER_SECOND, value: {{ $c.sourceConnectionsPerSecond | int64 | quote }} }
- { name: SOURCE_CONNECTIONS_BURST, value: {{ $c.sourceConnectionsBurst | int64 | quote }} }
{{- /* End of the generated lines. */}}
{{- include "nsfwdetector.derivedCoreEnv" . }}
{{- end -}}

{{/* The configuration the operator reads (lib/common/config.ts's core, its Redis settings). */}}
{{- define "nsfwdetector.operatorConfigEnv" -}}
{{- $c := .Values.config -}}
- { name: NODE_ENV, value: production }
- { name: HOST, value: "0.0.0.0" }
{{- /* Generated from lib/common/settings.ts by `npm run settings`: the `config` values the operator reads. */}}
{{- if ge (int64 $c.shutdownDelayMs) (int64 $c.shutdownGraceMs) }}
{{- fail (printf "config.shutdownDelayMs must be less than config.shutdownGraceMs (the drain is part of the grace period), got %d and %d" (int64 $c.shutdownDelayMs) (int64 $c.shutdownGraceMs)) }}
{{- end }}
- { name: LOG_LEVEL, value: {{ $c.logLevel | quote }} }
- { name: SHUTDOWN_GRACE_MS, value: {{ $c.shutdownGraceMs | int64 | quote }} }
- { name: SHUTDOWN_DELAY_MS, value: {{ $c.shutdownDelayMs | int64 | quote }} }
- { name: REDIS_KEY_PREFIX, value: {{ $c.redisKeyPrefix | quote }} }
- { name: REDIS_COMMAND_TIMEOUT_MS, value: {{ $c.redisCommandTimeoutMs | int64 | quote }} }
{{- /* End of the operator's generated lines. */}}
{{- include "nsfwdetector.derivedCoreEnv" . }}
{{- end -}}

{{/* The core settings the chart derives from other values (every process reads them). */}}
{{- define "nsfwdetector.derivedCoreEnv" -}}
{{- $c := .Values.config }}
- { name: TRUSTED_PROXY_HOPS, value: {{ add1 .Values.envoy.xffNumTrustedHops | quote }} }
{{- with $c.otlpEndpoint }}
- { name: OTEL_EXPORTER_OTLP_ENDPOINT, value: {{ . | quote }} }
{{- /* Traces that start in a service (not behind Envoy) are sampled at the edge's rate. */}}
- { name: TRACE_SAMPLE_RATIO, value: {{ divf $.Values.envoy.tracing.samplingPercent 100 | quote }} }
{{- end }}
{{- end -}}

{{/* Pods (the operator's too) get the processes' grace plus 10 s (Envoy's preStop pause, process exit). */}}
{{- define "nsfwdetector.terminationGrace" -}}
{{ add (div .Values.config.shutdownGraceMs 1000) 10 }}
{{- end -}}

{{/* HTTP probes of a service on its port: startup (model load), readiness, liveness. */}}
{{- define "nsfwdetector.httpProbes" -}}
startupProbe:
  httpGet: { path: /internal/live, port: {{ .port }} }
  periodSeconds: 2
  failureThreshold: {{ .startupFailures | default 30 }}
readinessProbe:
  httpGet: { path: /internal/ready, port: {{ .port }} }
  periodSeconds: 5
  failureThreshold: {{ .readyFailures | default 2 }}
livenessProbe:
  httpGet: { path: /internal/live, port: {{ .port }} }
  periodSeconds: 10
  failureThreshold: 3
{{- end -}}

{{/* A writable /tmp (the root filesystem is read-only). */}}
{{- define "nsfwdetector.tmpVolume" -}}
- name: tmp
  emptyDir: { sizeLimit: 64Mi }
{{- end -}}

{{/* EDGE_SECRET for Envoy (which sends it) and detect (which checks it). */}}
{{- define "nsfwdetector.edgeSecretEnv" -}}
- name: EDGE_SECRET
  valueFrom:
    secretKeyRef:
      {{- if .Values.edgeSecret.existingSecret }}
      name: {{ .Values.edgeSecret.existingSecret }}
      key: {{ .Values.edgeSecret.existingSecretKey }}
      {{- else }}
      name: {{ include "nsfwdetector.prefix" . }}-edge
      key: edge-secret
      {{- end }}
{{- end -}}

{{- /*
The policy file the operator renders from the DetectionPolicy named operator.policyName (ConfigMap
<name>-policy), mounted into detect and quota when the operator is on. Optional: until the operator has
rendered it, the services run on their configuration. The kubelet swaps the file by `..data` symlink.
*/ -}}
{{- define "nsfwdetector.policyEnv" -}}
{{- if .Values.operator.enabled }}
- { name: POLICY_FILE, value: /etc/nsfwdetector/policy/policy.json }
{{- end }}
{{- end -}}

{{- define "nsfwdetector.policyMount" -}}
{{- if .Values.operator.enabled }}
- { name: policy, mountPath: /etc/nsfwdetector/policy, readOnly: true }
{{- end }}
{{- end -}}

{{- define "nsfwdetector.policyVolume" -}}
{{- if .Values.operator.enabled }}
- name: policy
  configMap:
    name: {{ printf "%s-policy" .Values.operator.policyName }}
    optional: true
{{- end }}
{{- end -}}

{{/* A rollout that never has fewer ready pods than asked for: a new pod is Ready before an old one goes. */}}
{{- define "nsfwdetector.rollingUpdate" -}}
strategy:
  type: RollingUpdate
  rollingUpdate: { maxSurge: 1, maxUnavailable: 0 }
{{- end -}}

{{/*
The address of an upstream for Envoy's clusters: an IP address as given, else its Service; for detect
that Service's headless twin (a host per ready pod: docs/kubernetes-ha.md).
*/}}
{{- define "nsfwdetector.upstreamAddress" -}}
{{- $address := toString (index .root.Values.envoy.upstreams .name).address -}}
{{- if regexMatch "^[0-9.]+$" $address -}}
{{- $address -}}
{{- else if eq .name "detect" -}}
{{- include "nsfwdetector.detectPodsService" .root -}}
{{- else -}}
{{- include "nsfwdetector.upstreamService" . -}}
{{- end -}}
{{- end -}}

{{/* detect's headless Service (<detect Service>-pods): its name resolves to every ready detect pod. */}}
{{- define "nsfwdetector.detectPodsService" -}}
{{- printf "%s-pods" (include "nsfwdetector.upstreamService" (dict "root" . "name" "detect")) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
The in-chart Redis pods' addresses: the ClusterIP of each pod's own Service (<prefix>-redis-<i>), which
stays the same when the pod comes back with a new IP and needs no DNS to reach, not even while a node
with a CoreDNS pod on it is being lost. Written as Kubernetes $(VAR) references to the Service links
(<PREFIX>_REDIS_<I>_SERVICE_HOST: the Services are installed before the pods), each formatted with
(dict "root" $ "format" "[%s]:26379"), joined by commas.
*/}}
{{- define "nsfwdetector.redisSentinelNodes" -}}
{{- $nodes := list -}}
{{- range $i := until (int .root.Values.redis.sentinel.nodes) -}}
{{- $service := include "nsfwdetector.redisPodService" (dict "root" $.root "ordinal" $i) -}}
{{- $nodes = append $nodes (printf $.format (printf "$(%s_SERVICE_HOST)" (upper (replace "-" "_" $service)))) -}}
{{- end -}}
{{- join "," $nodes -}}
{{- end -}}

{{/* The Service of in-chart Redis pod `ordinal` (its name: the pod's). */}}
{{- define "nsfwdetector.redisPodService" -}}
{{- printf "%s-redis-%d" (include "nsfwdetector.prefix" .root) (int .ordinal) -}}
{{- end -}}
