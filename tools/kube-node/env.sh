# Sourced by the local node's scripts (up.sh, down.sh, image.sh): where everything is, the versions,
# and small helpers. Binaries come from the tools cache that .ci/install-k8s-tools.sh fills; the node's
# state (etcd, kubelet, containerd, registry data, certificates, logs, pid files) lives under
# $KUBE_NODE_DIR and its sockets under $KUBE_NODE_RUN. kube:down removes both.
# shellcheck shell=bash

REPO_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
NODE_KIT=$REPO_DIR/tools/kube-node
TOOLS_DIR=${NSFWDETECTOR_TOOLS_DIR:-$HOME/.cache/nsfwdetector-tools}
KUBE_NODE_DIR=${NSFWDETECTOR_KUBE_NODE_DIR:-$TOOLS_DIR/kube-node}
KUBE_NODE_RUN=${NSFWDETECTOR_KUBE_NODE_RUN:-/run/nsfwdetector-kube-node}
STATE_DIR=$KUBE_NODE_DIR/state
LOG_DIR=$KUBE_NODE_DIR/logs
PKI_DIR=$KUBE_NODE_DIR/pki
CONF_DIR=$KUBE_NODE_DIR/conf
# Images built by kube:image: the private dockerd's data (its build cache) survives kube:down. A release
# has its own (NSFWDETECTOR_KUBE_DOCKER_DATA, tools/release/lib.sh), so that it never shares a dockerd with
# a node's run.
DOCKER_DATA=${NSFWDETECTOR_KUBE_DOCKER_DATA:-$TOOLS_DIR/kube-node-docker}

. "$REPO_DIR/.ci/kube-versions.sh"

BIN=$TOOLS_DIR/bin
CONTAINERD_DIR=$TOOLS_DIR/containerd-$CONTAINERD_VERSION
ETCD_BIN=$BIN/etcd-$ETCD_VERSION
KUBECTL=$BIN/kubectl
# Every binary the node runs; up.sh builds the missing ones (install-k8s-tools.sh --node).
NODE_BINARIES=("$ETCD_BIN" "$BIN/kube-apiserver-$KUBE_VERSION" "$BIN/kube-controller-manager-$KUBE_VERSION"
  "$BIN/kube-scheduler-$KUBE_VERSION" "$BIN/kubelet-$KUBE_VERSION" "$BIN/kube-proxy-$KUBE_VERSION"
  "$CONTAINERD_DIR/containerd" "$CONTAINERD_DIR/containerd-shim-runc-v2" "$CONTAINERD_DIR/ctr"
  "$BIN/coredns-$COREDNS_VERSION" "$BIN/kube-router-$KUBE_ROUTER_VERSION"
  "$TOOLS_DIR/metrics-server-$METRICS_SERVER_VERSION/metrics-server" "$TOOLS_DIR/registry-$REGISTRY_VERSION/registry"
  "$BIN/pause-$KUBE_VERSION" "$KUBECTL" /usr/sbin/runc /usr/lib/cni/bridge /usr/sbin/iptables /usr/sbin/ipset /usr/sbin/nft)

# The node's network: a bridge of its own whose address is the node IP (the apiserver, the kubelet and
# etcd listen there, so nothing collides with services on loopback), pods in 10.244.0.0/24, Services in
# 10.96.0.0/16 (kubernetes 10.96.0.1, cluster DNS 10.96.0.10). The registry listens on loopback.
BRIDGE=nsfwkube0
NODE_IP=10.244.0.1
POD_CIDR=10.244.0.0/24
CLUSTER_CIDR=10.244.0.0/16
SERVICE_CIDR=10.96.0.0/16
CLUSTER_DNS=10.96.0.10
NODE_NAME=nsfwdetector-node
# The pod subnet's gateway: node 1's bridge address is its node IP (the CNI conflist's gateway).
POD_GATEWAY=$NODE_IP
REGISTRY=${NSFWDETECTOR_KUBE_REGISTRY:-127.0.0.1:5000}
PAUSE_IMAGE=registry.k8s.io/pause:3.10.1
COREDNS_IMAGE=kube-node.local/coredns:$COREDNS_VERSION
METRICS_SERVER_IMAGE=kube-node.local/metrics-server:$METRICS_SERVER_VERSION

export KUBECONFIG=$PKI_DIR/admin.kubeconfig
CONTAINERD_SOCK=$KUBE_NODE_RUN/containerd.sock
CTR=("$CONTAINERD_DIR/ctr" -a "$CONTAINERD_SOCK" -n k8s.io)
DOCKER_SOCK=$KUBE_NODE_RUN/docker.sock
NICE=(nice -n "${NSFWDETECTOR_KUBE_NICE:-0}")

# running NAME: the process recorded in $STATE_DIR/NAME.pid is alive.
running() { [[ -f "$STATE_DIR/$1.pid" ]] && kill -0 "$(<"$STATE_DIR/$1.pid")" 2>/dev/null; }

# start_bg NAME CMD...: CMD in the background (niced, in its own session so a terminal's Ctrl-C does not
# reach it), output to $LOG_DIR/NAME.log, pid to $STATE_DIR/NAME.pid. A no-op when it already runs.
start_bg() {
  local name=$1; shift
  running "$name" && return 0
  setsid "${NICE[@]}" "$@" >"$LOG_DIR/$name.log" 2>&1 </dev/null &
  echo $! >"$STATE_DIR/$name.pid"
}

# stop NAME...: SIGTERM by pid file to all of them at once (their shutdowns overlap: one wait, not one
# per process), SIGKILL to any still running 10 s later; never by name.
stop() {
  local n f p i
  local -a files=() pids=() alive
  for n in "$@"; do
    f=$STATE_DIR/$n.pid
    [[ -f "$f" ]] || continue
    files+=("$f")
    p=$(<"$f")
    kill "$p" 2>/dev/null && pids+=("$p")
  done
  for i in $(seq 1 40); do
    alive=()
    for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive+=("$p"); done
    pids=("${alive[@]}")
    ((${#pids[@]} > 0)) || break
    sleep 0.25
  done
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  rm -f "${files[@]}"
}

# containerd shims (the node's, and those of dockerd's own containerd) put their sockets in
# /run/containerd/s, a fixed path. claim_run_containerd notes that we are about to make /run/containerd;
# release_run_containerd removes it again once nothing uses it, if it was ours.
claim_run_containerd() { [[ -d /run/containerd ]] || touch "$STATE_DIR/made-run-containerd"; }
release_run_containerd() {
  [[ -f "$STATE_DIR/made-run-containerd" ]] || return 0
  # A shim killed with SIGKILL (a lost node) leaves its socket behind: those nothing listens on go.
  local f listening
  listening=$(ss -xl 2>/dev/null)
  for f in /run/containerd/s/*; do
    [[ -S "$f" ]] && ! grep -qF "$f" <<<"$listening" && rm -f "$f"
  done
  rmdir /run/containerd/s /run/containerd 2>/dev/null && rm -f "$STATE_DIR/made-run-containerd"
  return 0
}

# since: seconds since $T0 (set by the caller).
since() { awk -v a="$T0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }'; }

# wait_for SECONDS WHAT CMD...: polls CMD every 0.5 s until it succeeds, or fails naming WHAT.
wait_for() {
  local limit=$1 what=$2 end
  shift 2
  end=$((SECONDS + limit))
  until "$@" >/dev/null 2>&1; do
    if ((SECONDS >= end)); then
      echo "kube-node: $what not within ${limit} s (logs: $LOG_DIR)" >&2
      return 1
    fi
    sleep 0.5
  done
}

# The kubelet's disk-pressure threshold, % of the disk free (a developer's disk is often fuller than a
# cluster node's: evict only when it is nearly full), and what kube:up wants free above it: the images
# the suites pull onto each node's containerd.
DISK_EVICTION_PERCENT=2
NODE_DISK_NEEDED_GIB=4

# render FILE: a file of conf/ with its @PLACEHOLDERS@ filled in, written to $CONF_DIR.
render() {
  mkdir -p "$CONF_DIR/$(dirname "$1")"
  sed -e "s|@STATE_DIR@|$STATE_DIR|g" -e "s|@RUN_DIR@|$KUBE_NODE_RUN|g" -e "s|@PKI_DIR@|$PKI_DIR|g" \
    -e "s|@CONF_DIR@|$CONF_DIR|g" -e "s|@NODE_NAME@|$NODE_NAME|g" -e "s|@NODE_IP@|$NODE_IP|g" \
    -e "s|@BRIDGE@|$BRIDGE|g" -e "s|@POD_CIDR@|$POD_CIDR|g" -e "s|@CLUSTER_CIDR@|$CLUSTER_CIDR|g" \
    -e "s|@CLUSTER_DNS@|$CLUSTER_DNS|g" -e "s|@REGISTRY@|$REGISTRY|g" -e "s|@PAUSE_IMAGE@|$PAUSE_IMAGE|g" \
    -e "s|@POD_GATEWAY@|$POD_GATEWAY|g" -e "s|@REGISTRY_MIRROR@|${REGISTRY_MIRROR:-$REGISTRY}|g" \
    -e "s|@DISK_EVICTION_PERCENT@|$DISK_EVICTION_PERCENT|g" \
    "$NODE_KIT/conf/$1" >"$CONF_DIR/$1"
}

# Nodes 2 and 3 (kube:up --nodes N): each in a network namespace of its own, joined to the host by a veth
# pair (host end nsfwkubeI, I = the node's number), with its own containerd, kubelet, kube-proxy and
# kube-router. Node 1 is the host itself, as with one node. The node addresses sit outside the cluster
# CIDR; each node's pod subnet is the one the controller-manager allocates it, routed by the host.
MAX_NODES=3
node_name() { if (($1 == 1)); then echo "$NODE_NAME"; else echo "$NODE_NAME-$1"; fi; }
node_netns() { echo "nsfwkube-node$1"; }
node_link() { echo "nsfwkube$1"; }
node_host_ip() { echo "10.243.$1.1"; }
node_ip() { echo "10.243.$1.2"; }
# Each extra node's own directories (state, sockets, rendered configuration) and cgroup root: the
# kubelets' /kubepods hierarchies must not overlap.
node_state() { echo "$STATE_DIR/node$1"; }
node_run() { echo "$KUBE_NODE_RUN/node$1"; }
node_conf() { echo "$CONF_DIR/node$1"; }
node_cgroup() { echo "nsfwkube-node$1"; }
# The extra nodes reach the registry through a second registry process on node 1's bridge address,
# serving the same storage (the first one stays on loopback, where image pushes go).
REGISTRY_FOR_NODES=$NODE_IP:5000
# nodes_up: how many nodes the running (or last started) cluster has.
nodes_up() { if [[ -f "$STATE_DIR/nodes" ]]; then cat "$STATE_DIR/nodes"; else echo 1; fi; }
# in_node I CMD...: CMD in node I's network namespace (the mount namespace stays the host's, so that the
# kubelet's volume mounts reach its containerd).
in_node() { local i=$1; shift; nsenter --net="/run/netns/$(node_netns "$i")" "$@"; }
