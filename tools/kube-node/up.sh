#!/usr/bin/env bash
# npm run kube:up: a single-node Kubernetes cluster on this machine, as plain host processes (no kubeadm,
# no systemd): etcd, kube-apiserver, kube-controller-manager, kube-scheduler, containerd, kubelet,
# kube-proxy (iptables), kube-router (NetworkPolicy only), CoreDNS and metrics-server as pods, a default
# StorageClass with static local volumes, and distribution's registry on loopback, which containerd pulls
# from over plain HTTP (npm run kube:image pushes there). Builds what is missing into the tools cache first.
# Prints each milestone's time and, last, KUBECONFIG=<path>. Again while up: a no-op. Needs root.
# npm run kube:down stops all of it and removes what it made.
# --nodes N (1 to 3, default 1; or NSFWDETECTOR_KUBE_NODES): nodes 2..N beside the first, each in a
# network namespace of its own (nodes.sh); prints each one's time to Ready and memory.
set -euo pipefail
. "$(dirname "$0")/env.sh"
. "$NODE_KIT/nodes.sh"
NODES=${NSFWDETECTOR_KUBE_NODES:-}
while (($#)); do
  case $1 in
  --nodes) NODES=${2:-}; shift 2 || true ;;
  --nodes=*) NODES=${1#--nodes=}; shift ;;
  *) echo "kube-node: unknown argument $1 (usage: up.sh [--nodes N])" >&2; exit 2 ;;
  esac
done
# Unsaid: as many as are up, or one.
[[ -n "$NODES" ]] || if [[ -f "$STATE_DIR/ready" ]]; then NODES=$(nodes_up); else NODES=1; fi
[[ "$NODES" =~ ^[1-9]$ ]] && ((NODES <= MAX_NODES)) || { echo "kube-node: --nodes takes 1 to $MAX_NODES" >&2; exit 2; }
T0=$EPOCHREALTIME
log() { echo "kube-node: [$(since) s] $*"; }

((EUID == 0)) || { echo "kube-node: needs root (network, mounts, cgroups)" >&2; exit 1; }
mkdir -p "$STATE_DIR" "$LOG_DIR" "$KUBE_NODE_RUN"

kc() { "$KUBECTL" --request-timeout=20s "$@"; }
all_running() {
  local n
  for n in registry containerd etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kube-router; do
    running "$n" || return 1
  done
  for ((i = 2; i <= NODES; i++)); do
    for n in containerd kubelet kube-proxy kube-router; do running "$n-$i" || return 1; done
  done
  ((NODES == 1)) || running registry-nodes
}
if [[ -f "$STATE_DIR/ready" ]] && (($(nodes_up) != NODES)); then
  echo "kube-node: up with $(nodes_up) node(s), not $NODES: npm run kube:down first" >&2
  exit 1
fi
if [[ -f "$STATE_DIR/ready" ]] && all_running && kc get --raw /readyz >/dev/null 2>&1; then
  log "already up"
  echo "KUBECONFIG=$KUBECONFIG"
  exit 0
fi

missing=0
for b in "${NODE_BINARIES[@]}"; do [[ -x "$b" ]] || missing=1; done
if ((missing)); then
  log "building the node's missing components (.ci/install-k8s-tools.sh --node; cold: about 20 CPU-minutes)"
  bash "$REPO_DIR/.ci/install-k8s-tools.sh" --node
fi

# The kubelet's disk-pressure threshold with room above it for what the suites pull (env.sh): below it,
# pods stay Pending behind the disk-pressure taint or are evicted, and a suite waits for them until its
# timeout.
read -r disk_size disk_free disk_mount < <(df -B1 --output=size,avail,target "$STATE_DIR" | tail -1)
disk_evict=$((disk_size * DISK_EVICTION_PERCENT / 100))
disk_floor=$((disk_evict + NODE_DISK_NEEDED_GIB * 1024 ** 3))
if ((disk_free < disk_floor)); then
  echo "kube-node: $((disk_free / 1024 ** 2)) MiB free on $disk_mount; the node needs" \
    "$((disk_floor / 1024 ** 2)) MiB: $DISK_EVICTION_PERCENT% (the kubelet evicts below it) and $NODE_DISK_NEEDED_GIB GiB for the images" \
    "it pulls. Largest in the tools cache: $(du -sh "$TOOLS_DIR"/* 2>/dev/null | sort -rh | head -3 | tr '\n\t' '; ')" >&2
  exit 1
fi
log "$((disk_free / 1024 ** 3)) GiB free on the node's disk (the kubelet evicts below $((disk_evict / 1024 ** 3)) GiB)"

# A half-started node (a crashed up) is cleaned first; another cluster's rules would be taken for ours.
if [[ -f "$STATE_DIR/started" ]]; then
  log "cleaning up a previous start"
  bash "$NODE_KIT/down.sh" >/dev/null
  mkdir -p "$STATE_DIR" "$LOG_DIR" "$KUBE_NODE_RUN"
elif iptables-save 2>/dev/null | grep -qE "KUBE-|kube-router"; then
  echo "kube-node: this machine already has KUBE-* iptables rules (another Kubernetes?); not starting" >&2
  exit 1
fi
touch "$STATE_DIR/started"
echo "$NODES" >"$STATE_DIR/nodes"

# Host settings changed below, recorded first so that kube:down restores them.
if [[ ! -f "$STATE_DIR/host-sysctl" ]]; then
  for k in net.ipv4.ip_forward net.bridge.bridge-nf-call-iptables; do echo "$k=$(sysctl -n "$k")"; done >"$STATE_DIR/host-sysctl"
  # The nf_tables tables already here: those iptables, kube-proxy and kube-router add are kube:down's to remove.
  nft list tables >"$STATE_DIR/host-nft-tables"
  [[ -d /var/log/containers ]] || touch "$STATE_DIR/made-var-log-containers"
  # Fixed paths whatever the flags: the kubelet's device-plugin socket directory
  # (/var/lib/kubelet/device-plugins) and containerd's CNI result cache (/var/lib/cni/results).
  [[ -d /var/lib/kubelet ]] || touch "$STATE_DIR/made-var-lib-kubelet"
  [[ -d /var/lib/cni ]] || touch "$STATE_DIR/made-var-lib-cni"
  # ip netns add makes /run/netns a shared mount of itself (once), and the directory if need be.
  [[ -d /run/netns ]] || touch "$STATE_DIR/made-run-netns"
  mountpoint -q /run/netns || touch "$STATE_DIR/made-run-netns-mount"
  claim_run_containerd
fi

for f in containerd.toml kubelet.yaml kube-proxy.yaml net.d/10-bridge.conflist resolv.conf registry.yml; do render "$f"; done
mkdir -p "$CONF_DIR/certs.d/$REGISTRY"
render registry-hosts.toml && mv "$CONF_DIR/registry-hosts.toml" "$CONF_DIR/certs.d/$REGISTRY/hosts.toml"
bash "$NODE_KIT/pki.sh"

# The bridge exists before any pod so that etcd, the apiserver and the kubelet can listen on the node IP.
ip link show "$BRIDGE" >/dev/null 2>&1 || ip link add "$BRIDGE" type bridge
ip addr show "$BRIDGE" | grep -q "$NODE_IP/24" || ip addr add "$NODE_IP/24" dev "$BRIDGE"
ip link set "$BRIDGE" up
# Service traffic is DNAT'ed on the bridge: forwarding and bridged packets through iptables.
sysctl -qw net.ipv4.ip_forward=1 net.bridge.bridge-nf-call-iptables=1

mkdir -p "$STATE_DIR/registry"
start_bg registry "$TOOLS_DIR/registry-$REGISTRY_VERSION/registry" serve "$CONF_DIR/registry.yml"
start_bg containerd env PATH="$CONTAINERD_DIR:$PATH" "$CONTAINERD_DIR/containerd" --config "$CONF_DIR/containerd.toml"
wait_for 30 "containerd" "${CTR[@]}" version
wait_for 30 "the registry" curl -fsS "http://$REGISTRY/v2/"
# Nodes 2..N: their namespaces and containerds, and the registry they pull from.
if ((NODES > 1)); then
  (REGISTRY=$REGISTRY_FOR_NODES && render registry.yml && mv "$CONF_DIR/registry.yml" "$CONF_DIR/registry-nodes.yml")
  start_bg registry-nodes "$TOOLS_DIR/registry-$REGISTRY_VERSION/registry" serve "$CONF_DIR/registry-nodes.yml"
  # Whatever happens to a node's link, traffic to the cluster's addresses never takes the default route
  # off this machine: the routes to each node are more specific than these.
  ip route replace blackhole "$CLUSTER_CIDR"
  ip route replace blackhole 10.243.0.0/16
  for ((i = 2; i <= NODES; i++)); do node_prepare "$i"; done
  for ((i = 2; i <= NODES; i++)); do wait_for 30 "node $i's containerd" node_ctr "$i" version; done
  wait_for 30 "the nodes' registry" curl -fsS "http://$REGISTRY_FOR_NODES/v2/"
fi
log "containerd and the registry up"

# The add-ons' images: one static binary each, imported into containerd (pods use them with
# imagePullPolicy: Never; the pause image is the pinned sandbox image).
import_binary_image() { # BINARY PATH IMAGE [USER]
  local tar i
  tar=$(mktemp)
  python3 "$NODE_KIT/binary-image.py" "$1" "$2" "$3" "$tar" "${4:-65535:65535}"
  local -a pids=()
  "${CTR[@]}" images ls -q "name==$3" | grep -q . || "${CTR[@]}" images import --platform linux/amd64 "$tar" >/dev/null &
  pids+=($!)
  for ((i = 2; i <= NODES; i++)); do
    { node_ctr "$i" images ls -q "name==$3" | grep -q . || node_ctr "$i" images import --platform linux/amd64 "$tar" >/dev/null; } &
    pids+=($!)
  done
  for i in "${pids[@]}"; do wait "$i"; done
  rm -f "$tar"
}
import_binary_image "$BIN/pause-$KUBE_VERSION" /pause "$PAUSE_IMAGE"
import_binary_image "$BIN/coredns-$COREDNS_VERSION" /coredns "$COREDNS_IMAGE" 0:0
import_binary_image "$TOOLS_DIR/metrics-server-$METRICS_SERVER_VERSION/metrics-server" /metrics-server "$METRICS_SERVER_IMAGE" 1000:1000
log "add-on images imported"

P=$PKI_DIR
K=$KUBECONFIG
start_bg etcd "$ETCD_BIN" --name node --data-dir "$STATE_DIR/etcd" \
  --listen-client-urls "http://$NODE_IP:2379" --advertise-client-urls "http://$NODE_IP:2379" \
  --listen-peer-urls "http://$NODE_IP:2380" --initial-advertise-peer-urls "http://$NODE_IP:2380" \
  --initial-cluster "node=http://$NODE_IP:2380" --listen-metrics-urls "http://$NODE_IP:2381" --unsafe-no-fsync
# --requestheader-*, --proxy-client-* and --enable-aggregator-routing serve metrics-server's APIService.
start_bg kube-apiserver "$BIN/kube-apiserver-$KUBE_VERSION" --etcd-servers="http://$NODE_IP:2379" \
  --bind-address="$NODE_IP" --advertise-address="$NODE_IP" --secure-port=6443 \
  --tls-cert-file="$P/apiserver.crt" --tls-private-key-file="$P/apiserver.key" --client-ca-file="$P/ca.crt" \
  --service-account-issuer=https://kubernetes.default.svc.cluster.local \
  --service-account-key-file="$P/sa.pub" --service-account-signing-key-file="$P/sa.key" \
  --service-cluster-ip-range="$SERVICE_CIDR" --authorization-mode=Node,RBAC \
  --enable-admission-plugins=NodeRestriction --allow-privileged=true \
  --kubelet-client-certificate="$P/admin.crt" --kubelet-client-key="$P/admin.key" \
  --kubelet-preferred-address-types=InternalIP \
  --requestheader-client-ca-file="$P/ca.crt" --requestheader-allowed-names=front-proxy-client \
  --requestheader-username-headers=X-Remote-User --requestheader-group-headers=X-Remote-Group \
  --requestheader-extra-headers-prefix=X-Remote-Extra- \
  --proxy-client-cert-file="$P/front-proxy.crt" --proxy-client-key-file="$P/front-proxy.key" \
  --enable-aggregator-routing=true
wait_for 180 "the apiserver's /readyz" kc get --raw /readyz
log "apiserver ready"
start_bg kube-controller-manager "$BIN/kube-controller-manager-$KUBE_VERSION" --kubeconfig="$K" \
  --authentication-kubeconfig="$K" --authorization-kubeconfig="$K" --leader-elect=false --bind-address="$NODE_IP" \
  --allocate-node-cidrs=true --cluster-cidr="$CLUSTER_CIDR" --node-cidr-mask-size=24 \
  --service-cluster-ip-range="$SERVICE_CIDR" --service-account-private-key-file="$P/sa.key" --root-ca-file="$P/ca.crt" \
  --use-service-account-credentials=true --cluster-signing-cert-file="$P/ca.crt" --cluster-signing-key-file="$P/ca.key" \
  --horizontal-pod-autoscaler-sync-period=5s
start_bg kube-scheduler "$BIN/kube-scheduler-$KUBE_VERSION" --kubeconfig="$K" \
  --authentication-kubeconfig="$K" --authorization-kubeconfig="$K" --leader-elect=false --bind-address="$NODE_IP"

# The kubelet wants vm.overcommit_memory=1, kernel.panic=10, kernel.panic_on_oops=1 and would rewrite the
# host's. It runs in a mount namespace of its own where three files holding those values cover
# /proc/sys/…, so protectKernelDefaults passes and the host is untouched. Its root directory is a shared
# bind mount: the volumes it mounts there (secrets, tokens) reach containerd in the host's namespace.
S=$STATE_DIR
mkdir -p "$S/kubelet" "$S/pod-logs" "$S/kubelet-sysctl"
mountpoint -q "$S/kubelet" || { mount --bind "$S/kubelet" "$S/kubelet" && mount --make-shared "$S/kubelet"; }
echo 1 >"$S/kubelet-sysctl/overcommit_memory"
echo 10 >"$S/kubelet-sysctl/panic"
echo 1 >"$S/kubelet-sysctl/panic_on_oops"
start_bg kubelet unshare -m --propagation unchanged sh -c "
  mount --make-private /proc
  mount --bind '$S/kubelet-sysctl/overcommit_memory' /proc/sys/vm/overcommit_memory
  mount --bind '$S/kubelet-sysctl/panic' /proc/sys/kernel/panic
  mount --bind '$S/kubelet-sysctl/panic_on_oops' /proc/sys/kernel/panic_on_oops
  exec '$BIN/kubelet-$KUBE_VERSION' --config='$CONF_DIR/kubelet.yaml' --kubeconfig='$K' --root-dir='$S/kubelet' --cert-dir='$S/kubelet-pki' \
    --node-ip=$NODE_IP --hostname-override=$NODE_NAME"
start_bg kube-proxy "$BIN/kube-proxy-$KUBE_VERSION" --config="$CONF_DIR/kube-proxy.yaml"
wait_for 120 "the Node object" kc get node "$NODE_NAME"
# Node 1's bridge has the first pod subnet: the others' kubelets start once node 1 has it.
if ((NODES > 1)); then
  has_pod_cidr() { [[ -n "$(kc get node "$NODE_NAME" -o jsonpath='{.spec.podCIDR}')" ]]; }
  wait_for 60 "node 1's pod subnet" has_pod_cidr
  cidr=$(kc get node "$NODE_NAME" -o jsonpath='{.spec.podCIDR}')
  [[ "$cidr" == "$POD_CIDR" ]] || { echo "kube-node: node 1 was given $cidr, not $POD_CIDR" >&2; exit 1; }
fi
declare -A STARTED
for ((i = 2; i <= NODES; i++)); do
  node_start "$i"
  STARTED[$i]=$EPOCHREALTIME
done
kc wait --for=condition=Ready "node/$NODE_NAME" --timeout=180s >/dev/null
log "node Ready"
# After the Node exists: kube-router finds its node by name at start.
start_bg kube-router "$BIN/kube-router-$KUBE_ROUTER_VERSION" --run-firewall=true --run-router=false \
  --run-service-proxy=false --kubeconfig="$K" --hostname-override="$NODE_NAME" --health-port=20244 --metrics-port=0
for ((i = 2; i <= NODES; i++)); do
  wait_for 120 "node $i's pod subnet" node_network "$i"
done
for ((i = 2; i <= NODES; i++)); do
  kc wait --for=condition=Ready "node/$(node_name "$i")" --timeout=180s >/dev/null
  node_router "$i"
  log "node $i ($(node_name "$i"), $(node_ip "$i"), pods $(kc get node "$(node_name "$i")" -o jsonpath='{.spec.podCIDR}')) Ready, $(T0=${STARTED[$i]} since) s after its kubelet started"
done

wait_for 60 "the default ServiceAccount" kc get serviceaccount default
fill() { sed -e "s|@COREDNS_REPLICAS@|$((NODES > 1 ? 2 : 1))|g" -e "s|@COREDNS_IMAGE@|$COREDNS_IMAGE|g" -e "s|@METRICS_SERVER_IMAGE@|$METRICS_SERVER_IMAGE|g" -e "s|@CLUSTER_DNS@|$CLUSTER_DNS|g" "$1"; }
fill "$NODE_KIT/manifests/coredns.yaml" | kc apply -f - >/dev/null
if ((NODES > 1)); then
  kc apply -f - >/dev/null <<'PDB'
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: coredns, namespace: kube-system}
spec: {minAvailable: 1, selector: {matchLabels: {k8s-app: kube-dns}}}
PDB
fi
fill "$NODE_KIT/manifests/metrics-server.yaml" | kc apply -f - >/dev/null
kc apply -f "$NODE_KIT/manifests/storage.yaml" >/dev/null
# Static local volumes for the default StorageClass (see manifests/storage.yaml). Every node shares this
# machine's disk: a volume may be mounted on any node, as network storage would be, so that a pod with a
# claim can move to another node (a drain, a lost node).
PV_NODES=$(for ((i = 1; i <= NODES; i++)); do node_name "$i"; done | paste -sd,)
for i in $(seq 1 8); do
  mkdir -p "$S/volumes/pv$i" && chmod 0777 "$S/volumes/pv$i"
  cat <<PV
apiVersion: v1
kind: PersistentVolume
metadata: {name: local-pv$i}
spec:
  capacity: {storage: 10Gi}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: local
  local: {path: "$S/volumes/pv$i"}
  nodeAffinity:
    required:
      nodeSelectorTerms: [{matchExpressions: [{key: kubernetes.io/hostname, operator: In, values: [$PV_NODES]}]}]
---
PV
done | kc apply -f - >/dev/null
kc -n kube-system rollout status deploy/coredns --timeout=180s >/dev/null
log "CoreDNS Ready"
kc -n kube-system rollout status deploy/metrics-server --timeout=180s >/dev/null
wait_for 120 "the metrics API" kc get --raw /apis/metrics.k8s.io/v1beta1/nodes
log "metrics-server Ready: the node is up"
for ((i = 2; i <= NODES; i++)); do
  log "node $i's own processes (containerd, kubelet, kube-proxy, kube-router): $(node_rss_mib "$i") MiB resident"
done
touch "$STATE_DIR/ready"
echo "KUBECONFIG=$KUBECONFIG"
