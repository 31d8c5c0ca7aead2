#!/usr/bin/env bash
# usage: lose-node.sh I — node I (2 or 3, of kube:up --nodes N) lost at once, as a machine whose power
# is cut: its link to the others cut first (the node's end of its veth pair down: what is sent to it is
# dropped unanswered, as by a dead machine, and the host's routes to it stay), then SIGKILL to
# its kubelet, containerd, kube-proxy and kube-router, its pods' shims and every process in its pods.
# Nothing is told to the cluster: the node controller finds out by itself. kube:down removes the remains.
# Prints the time it took and, last, the epoch in ms at which the link was cut.
set -euo pipefail
. "$(dirname "$0")/env.sh"
. "$NODE_KIT/nodes.sh"
((EUID == 0)) || { echo "kube-node: needs root" >&2; exit 1; }
i=${1:-}
[[ "$i" =~ ^[2-9]$ ]] && ((i <= $(nodes_up))) || { echo "usage: $0 NODE (2..$(nodes_up))" >&2; exit 2; }
T0=$EPOCHREALTIME
cut=$(date +%s%3N)
ip -n "$(node_netns "$i")" link set eth0 down
for n in kubelet containerd kube-proxy kube-router; do
  [[ -f "$STATE_DIR/$n-$i.pid" ]] && kill -9 "$(<"$STATE_DIR/$n-$i.pid")" 2>/dev/null
done
for pid in $(pgrep -f -- "-address $(node_run "$i")/containerd.sock" 2>/dev/null); do kill -9 "$pid" 2>/dev/null; done
find /sys/fs/cgroup/*/"$(node_cgroup "$i")" -name cgroup.procs -exec cat {} + 2>/dev/null | sort -u | xargs -r kill -9 2>/dev/null
echo "kube-node: [$(since) s] node $i ($(node_name "$i")) lost: link cut, its processes and pods killed"
echo "$cut"
