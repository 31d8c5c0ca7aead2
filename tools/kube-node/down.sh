#!/usr/bin/env bash
# npm run kube:down: stops every process kube:up (and kube:image) started, by pid file, and removes what
# they made: pod sandboxes and containers, the bridge, pod network namespaces, iptables chains (KUBE-*,
# v4 and v6) and ipsets, mounts under the node's directories, the kubepods cgroups, the kubelet's
# /var/log/containers links, the node's state; restores the sysctls kube:up changed. Works after a crashed
# or half-finished up, and when nothing runs. Needs root. With nodes 2..N (up.sh --nodes N): their
# processes and pods too, their network namespaces, veth pairs, routes and cgroup roots.
set -uo pipefail
. "$(dirname "$0")/env.sh"
. "$NODE_KIT/nodes.sh"
((EUID == 0)) || { echo "kube-node: needs root" >&2; exit 1; }
S=$STATE_DIR
mkdir -p "$S"

# Whatever the number of nodes recorded (a crashed up may have recorded none): every possible one.
for ((i = 2; i <= MAX_NODES; i++)); do node_down "$i"; done
stop kube-router kube-proxy kubelet
# Pod sandboxes and containers through containerd, so that their shims exit; then containerd.
if running containerd && [[ -S "$CONTAINERD_SOCK" ]]; then
  for t in $("${CTR[@]}" tasks ls -q 2>/dev/null); do "${CTR[@]}" tasks kill -s SIGKILL "$t" >/dev/null 2>&1; done
  for _ in $(seq 1 20); do
    [[ -z "$("${CTR[@]}" tasks ls -q 2>/dev/null)" ]] && break
    for t in $("${CTR[@]}" tasks ls -q 2>/dev/null); do "${CTR[@]}" tasks delete -f "$t" >/dev/null 2>&1; done
    sleep 0.25
  done
  for c in $("${CTR[@]}" containers ls -q 2>/dev/null); do "${CTR[@]}" containers delete "$c" >/dev/null 2>&1; done
fi
stop containerd kube-scheduler kube-controller-manager kube-apiserver etcd registry registry-nodes dockerd

# What a killed containerd may leave: shims (their command line names our socket) and the processes
# of pod cgroups.
for pid in $(pgrep -f -- "-address $KUBE_NODE_RUN/" 2>/dev/null); do kill -9 "$pid" 2>/dev/null; done
for d in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/*/nsfwkube-node*; do
  [[ -d "$d" ]] || continue
  find "$d" -name cgroup.procs -exec cat {} + 2>/dev/null | xargs -r kill -9 2>/dev/null
done

# Pod network namespaces (the CNI names them cni-…, their bind mounts live under /run/netns). Their
# veths' host ends on node 1's bridge are deleted first: a deleted namespace's links go only when the
# kernel gets round to it, seconds later.
for l in $(ip -o link show master "$BRIDGE" 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1); do
  ip link del "$l" 2>/dev/null
done
for ns in $(ip netns list 2>/dev/null | awk '/^cni-/{print $1}'); do ip netns delete "$ns" 2>/dev/null; done
# Mounts under our directories, deepest first (volumes, container root filesystems, shm, the kubelet's
# shared bind mount, dockerd's overlays).
for dir in "$KUBE_NODE_DIR" "$KUBE_NODE_RUN" "$DOCKER_DATA"; do
  awk -v p="$dir" 'index($5, p "/") == 1 || $5 == p {print $5}' /proc/self/mountinfo | sort -r |
    while read -r m; do umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null; done
done

# iptables: every KUBE-* chain (kube-proxy's, the kubelet's, kube-router's KUBE-ROUTER-*, KUBE-NWPLCY-*,
# KUBE-POD-FW-*, …); kube:up refuses to start on a machine that already had any. First the rules in the
# built-in chains that jump to them or name them (kube-router's ACCEPT rules carry a KUBE-ROUTER comment),
# then the chains themselves.
for ipt in iptables ip6tables; do
  for t in filter nat mangle raw; do
    $ipt -t "$t" -S 2>/dev/null | grep -E '^-A [A-Z]+ .*(KUBE-|kube-router)' | grep -vE '^-A KUBE-' | sed 's/^-A/-D/' |
      while read -r r; do eval "$ipt -t $t $r" 2>/dev/null; done
    chains=$($ipt -t "$t" -S 2>/dev/null | awk '/^-N KUBE-/{print $2}')
    for ch in $chains; do $ipt -t "$t" -F "$ch" 2>/dev/null; done
    for ch in $chains; do $ipt -t "$t" -X "$ch" 2>/dev/null; done
  done
done
for s in $(ipset list -n 2>/dev/null | grep -E '^(KUBE-|kube-router)'); do ipset destroy "$s" 2>/dev/null; done
# The nf_tables tables the node's iptables, kube-proxy and kube-router made (not there before kube:up), once
# nothing is left in them but empty chains; a table that was there before, or holds anyone's rules, stays.
if [[ -f "$S/host-nft-tables" ]]; then
  nft list tables 2>/dev/null | while read -r _ family name; do
    grep -qx "table $family $name" "$S/host-nft-tables" && continue
    nft list table "$family" "$name" 2>/dev/null | grep -qvE '^\s*(table .*\{|chain .*\{|type .*;|policy .*;|\}|)$' && continue
    nft delete table "$family" "$name"
  done
fi

ip link show "$BRIDGE" >/dev/null 2>&1 && ip link del "$BRIDGE"
for ((i = 2; i <= MAX_NODES; i++)); do node_remove_network "$i"; done
for r in "$CLUSTER_CIDR" 10.243.0.0/16; do ip route show type blackhole | grep -q "^blackhole $r" && ip route del blackhole "$r"; done
if [[ -z "$(ls -A /run/netns 2>/dev/null)" ]]; then
  [[ -f "$S/made-run-netns-mount" ]] && umount /run/netns 2>/dev/null
  [[ -f "$S/made-run-netns" ]] && rmdir /run/netns 2>/dev/null
fi
# Veths of pods whose namespaces are gone disappear with them; the kubelet's cgroups (cgroupfs driver),
# emptied above, are removed deepest first.
for d in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/*/nsfwkube-node*; do
  [[ -d "$d" ]] && find "$d" -depth -type d -exec rmdir {} + 2>/dev/null
done
# The kubelet links container logs into /var/log/containers (a fixed path) to our pod-logs directory.
if [[ -d /var/log/containers ]]; then
  find /var/log/containers -maxdepth 1 -type l -lname "$S/*" -delete 2>/dev/null
  [[ -f "$S/made-var-log-containers" ]] && rmdir /var/log/containers 2>/dev/null
fi
for d in kubelet cni; do [[ -f "$S/made-var-lib-$d" ]] && rm -rf "/var/lib/$d"; done
release_run_containerd
if [[ -f "$S/host-sysctl" ]]; then
  while IFS= read -r kv; do sysctl -qw "$kv"; done <"$S/host-sysctl"
fi
# The logs stay for a post-mortem (the next kube:up overwrites them).
rm -rf "$KUBE_NODE_RUN" "$STATE_DIR" "$PKI_DIR" "$CONF_DIR"
echo "kube-node: down"
