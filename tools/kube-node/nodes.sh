# Sourced by up.sh and down.sh after env.sh: nodes 2 and 3 of kube:up --nodes N. Each runs in a network
# namespace of its own with a veth pair to the host, its own containerd (root, state, socket, runc root,
# CNI configuration and IPAM), kubelet (root, certificate, pod-log and device-plugin directories, cgroup
# root), kube-proxy and kube-router, all as host processes as node 1's are. The network namespace is
# entered with nsenter and the mount namespace stays the host's: the kubelet's volume mounts (a shared
# bind mount, as node 1's) reach its containerd, which creates the pods' root filesystems.
# shellcheck shell=bash

# node_kc ARGS...: kubectl (up.sh defines kc; down.sh does not need it).
node_kc() { "$KUBECTL" --request-timeout=20s "$@"; }

# node_prepare I: the namespace, the veth pair and routes, the node's sysctls, cgroup root, directories
# and configuration, and its containerd started. The pod subnet comes later (node_network).
node_prepare() {
  local i=$1 ns link st run conf c
  ns=$(node_netns "$i") link=$(node_link "$i") st=$(node_state "$i") run=$(node_run "$i") conf=$(node_conf "$i")
  mkdir -p "$st/containerd" "$run" "$conf"
  # Its images and containers' layers (about 1.2 GiB, 23,000 files with the chart's images) in memory:
  # deleting them from this disk took kube:down over a minute per node; unmounting takes none.
  mountpoint -q "$st/containerd" || mount -t tmpfs -o size=4g,mode=0711 "tmpfs-node$i" "$st/containerd"
  ip netns list | grep -qx "$ns\( .*\)\?" || ip netns add "$ns"
  if ! ip link show "$link" >/dev/null 2>&1; then
    ip link add "$link" type veth peer name eth0 netns "$ns"
    ip addr add "$(node_host_ip "$i")/24" dev "$link"
    ip link set "$link" up
  fi
  in_node "$i" sh -c "
    ip link set lo up
    ip addr show eth0 | grep -q '$(node_ip "$i")/24' || ip addr add '$(node_ip "$i")/24' dev eth0
    ip link set eth0 up
    ip route replace default via '$(node_host_ip "$i")'
    sysctl -qw net.ipv4.ip_forward=1 net.bridge.bridge-nf-call-iptables=1"
  # The kubelet checks that its cgroup root exists in every hierarchy; cpuset needs its CPUs and memory
  # nodes set before anything can join it.
  c=$(node_cgroup "$i")
  for d in /sys/fs/cgroup/*/; do
    [[ -f "$d/cgroup.procs" ]] || continue
    mkdir -p "$d$c"
  done
  if [[ -d /sys/fs/cgroup/cpuset/$c ]]; then
    cat /sys/fs/cgroup/cpuset/cpuset.cpus >"/sys/fs/cgroup/cpuset/$c/cpuset.cpus"
    cat /sys/fs/cgroup/cpuset/cpuset.mems >"/sys/fs/cgroup/cpuset/$c/cpuset.mems"
  fi
  (
    STATE_DIR=$st KUBE_NODE_RUN=$run CONF_DIR=$conf NODE_NAME=$(node_name "$i") NODE_IP=$(node_ip "$i")
    REGISTRY_MIRROR=$REGISTRY_FOR_NODES
    for f in containerd.toml kubelet.yaml kube-proxy.yaml resolv.conf; do render "$f"; done
    echo "cgroupRoot: /$c" >>"$CONF_DIR/kubelet.yaml"
    mkdir -p "$CONF_DIR/certs.d/$REGISTRY"
    render registry-hosts.toml && mv "$CONF_DIR/registry-hosts.toml" "$CONF_DIR/certs.d/$REGISTRY/hosts.toml"
  )
  # containerd's CNI watches an empty directory until node_network writes the pod subnet there.
  mkdir -p "$conf/net.d"
  start_bg "containerd-$i" nsenter --net="/run/netns/$ns" env PATH="$CONTAINERD_DIR:$PATH" "$CONTAINERD_DIR/containerd" \
    --config "$conf/containerd.toml"
}

# node_ctr I ARGS...: ctr on node I's containerd.
node_ctr() { local i=$1; shift; "$CONTAINERD_DIR/ctr" -a "$(node_run "$i")/containerd.sock" -n k8s.io "$@"; }

# node_start I: its kubelet and kube-proxy (after node 1's Node exists, so node 1 takes the first pod
# subnet, the one its bridge was given).
node_start() {
  local i=$1 st conf name
  st=$(node_state "$i") conf=$(node_conf "$i") name=$(node_name "$i")
  mkdir -p "$st/kubelet" "$st/pod-logs" "$st/kubelet-sysctl" "$st/device-plugins"
  mountpoint -q "$st/kubelet" || { mount --bind "$st/kubelet" "$st/kubelet" && mount --make-shared "$st/kubelet"; }
  echo 1 >"$st/kubelet-sysctl/overcommit_memory"
  echo 10 >"$st/kubelet-sysctl/panic"
  echo 1 >"$st/kubelet-sysctl/panic_on_oops"
  # As node 1's kubelet, plus: /var/lib/kubelet/device-plugins is a fixed path where every kubelet
  # deletes what it finds and listens: each node's is its own here.
  start_bg "kubelet-$i" nsenter --net="/run/netns/$(node_netns "$i")" unshare -m --propagation unchanged sh -c "
    mount --make-private /proc
    mount --bind '$st/kubelet-sysctl/overcommit_memory' /proc/sys/vm/overcommit_memory
    mount --bind '$st/kubelet-sysctl/panic' /proc/sys/kernel/panic
    mount --bind '$st/kubelet-sysctl/panic_on_oops' /proc/sys/kernel/panic_on_oops
    mkdir -p /var/lib/kubelet/device-plugins
    mount --bind '$st/device-plugins' /var/lib/kubelet/device-plugins
    exec '$BIN/kubelet-$KUBE_VERSION' --config='$conf/kubelet.yaml' --kubeconfig='$KUBECONFIG' \
      --root-dir='$st/kubelet' --cert-dir='$st/kubelet-pki' --node-ip=$(node_ip "$i") --hostname-override=$name"
  start_bg "kube-proxy-$i" nsenter --net="/run/netns/$(node_netns "$i")" "$BIN/kube-proxy-$KUBE_VERSION" --config="$conf/kube-proxy.yaml"
}

# node_network I: once the controller-manager gave node I its pod subnet: the CNI configuration for it
# (containerd picks it up, the node turns Ready) and the host's route to it.
node_network() {
  local i=$1 cidr
  cidr=$(node_kc get node "$(node_name "$i")" -o jsonpath='{.spec.podCIDR}')
  [[ -n "$cidr" ]] || return 1
  (
    CONF_DIR=$(node_conf "$i") KUBE_NODE_RUN=$(node_run "$i") POD_CIDR=$cidr POD_GATEWAY=${cidr%.0/24}.1
    render net.d/10-bridge.conflist
  )
  ip route replace "$cidr" via "$(node_ip "$i")" dev "$(node_link "$i")"
}

# node_router I: its kube-router (NetworkPolicy), once its Node exists.
node_router() {
  local i=$1
  start_bg "kube-router-$i" nsenter --net="/run/netns/$(node_netns "$i")" "$BIN/kube-router-$KUBE_ROUTER_VERSION" --run-firewall=true \
    --run-router=false --run-service-proxy=false --kubeconfig="$KUBECONFIG" \
    --hostname-override="$(node_name "$i")" --health-port=20244 --metrics-port=0
}

# node_rss_mib I: the resident memory of node I's own processes (containerd, kubelet, kube-proxy,
# kube-router; not its pods nor their shims), in MiB.
node_rss_mib() {
  local i=$1 n total=0 p kb
  for n in containerd kubelet kube-proxy kube-router; do
    [[ -f "$STATE_DIR/$n-$i.pid" ]] || continue
    # setsid, nice, nsenter, unshare and sh exec: the pid start_bg recorded is the component's.
    p=$(<"$STATE_DIR/$n-$i.pid")
    kb=$(awk '/^VmRSS:/{print $2}' "/proc/$p/status" 2>/dev/null)
    total=$((total + ${kb:-0}))
  done
  echo $((total / 1024))
}

# node_down I: node I's processes stopped (its pods' containers first, through its containerd), its
# namespace, veth pair, route and cgroup root removed. Its mounts and pod network namespaces go with
# node 1's in down.sh.
node_down() {
  local i=$1 t sock
  stop "kube-router-$i" "kube-proxy-$i" "kubelet-$i"
  sock=$(node_run "$i")/containerd.sock
  if running "containerd-$i" && [[ -S "$sock" ]]; then
    for t in $(node_ctr "$i" tasks ls -q 2>/dev/null); do node_ctr "$i" tasks kill -s SIGKILL "$t" >/dev/null 2>&1; done
    for _ in $(seq 1 20); do
      [[ -z "$(node_ctr "$i" tasks ls -q 2>/dev/null)" ]] && break
      for t in $(node_ctr "$i" tasks ls -q 2>/dev/null); do node_ctr "$i" tasks delete -f "$t" >/dev/null 2>&1; done
      sleep 0.25
    done
    for c in $(node_ctr "$i" containers ls -q 2>/dev/null); do node_ctr "$i" containers delete "$c" >/dev/null 2>&1; done
  fi
  stop "containerd-$i"
}

# node_remove_network I: the namespace (its bridge, veths, iptables rules, ipsets and nf_tables tables go
# with it), the host's end of the veth pair and with it the route to the node's pods.
node_remove_network() {
  local i=$1
  # The host's end first: deleting it is immediate, while a deleted namespace's links go when the kernel
  # gets round to it.
  ip link show "$(node_link "$i")" >/dev/null 2>&1 && ip link del "$(node_link "$i")"
  ip netns list | grep -q "^$(node_netns "$i")\b" && ip netns delete "$(node_netns "$i")"
  return 0
}
