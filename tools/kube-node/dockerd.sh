#!/usr/bin/env bash
# usage: dockerd.sh start|stop — the private dockerd that builds the images (kube:image, .ci/image-smoke.sh):
# its own socket (printed by start as a DOCKER_HOST value), data root in the tools cache (the build cache
# survives kube:down) and exec root; no bridge and no iptables, masquerade or ip_forward changes, so
# builds and containers use the host's network (--network host).
set -euo pipefail
. "$(dirname "$0")/env.sh"

# What earlier builds left in the data root, removed: the legacy builder keeps every build's stages as
# untagged images (~2 GB each) and some step containers, and kube:image tags each upgrade image; the data
# root grew by ~5 GB a CI run until the kubelet's disk-pressure eviction stopped pods from starting. Kept:
# everything from the newest build's quarter of an hour (the next build's layer cache: image-smoke and
# kube:image build the same tree), the bases, and tags that are not the node suites' (local, a digest).
prune_old_builds() {
  local newest cutoff ref created
  newest=$(docker images --format '{{.CreatedAt}}' | head -1) || return 1
  [[ -n "$newest" ]] || return 0
  cutoff=$(($(date -d "${newest% *}" +%s) - 900))
  docker container prune -f >/dev/null || return 1
  while read -r ref created; do
    [[ "$ref" =~ :(local|[0-9a-f]{64})$ ]] || continue
    if (($(date -d "${created% *}" +%s) < cutoff)); then docker rmi "$ref" >/dev/null || return 1; fi
  done < <(docker images --format '{{.Repository}}:{{.Tag}} {{.CreatedAt}}' "$REGISTRY/nsfwdetector")
  docker image prune -f --filter "until=$cutoff" >/dev/null
}

case ${1:-} in
start)
  command -v dockerd >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends docker.io >&2
  mkdir -p "$DOCKER_DATA" "$KUBE_NODE_RUN" "$STATE_DIR" "$LOG_DIR"
  claim_run_containerd
  start_bg dockerd dockerd -H "unix://$DOCKER_SOCK" --data-root "$DOCKER_DATA" \
    --exec-root "$KUBE_NODE_RUN/docker-exec" --pidfile "$KUBE_NODE_RUN/dockerd.pid" --bridge none \
    --iptables=false --ip6tables=false --ip-masq=false --ip-forward=false --storage-driver overlay2
  DOCKER_HOST=unix://$DOCKER_SOCK wait_for 60 "dockerd" docker version
  echo "unix://$DOCKER_SOCK"
  ;;
stop)
  if DOCKER_HOST=unix://$DOCKER_SOCK docker version >/dev/null 2>&1; then
    DOCKER_HOST=unix://$DOCKER_SOCK prune_old_builds ||
      echo "kube-node: pruning earlier builds from $DOCKER_DATA failed; it keeps them" >&2
  fi
  stop dockerd
  # dockerd leaves its exec root's network namespace mounted
  awk -v p="$KUBE_NODE_RUN/docker-exec/" 'index($5, p) == 1 {print $5}' /proc/self/mountinfo | sort -r |
    while read -r m; do umount "$m" 2>/dev/null || umount -l "$m"; done
  release_run_containerd
  # Without the node (image-smoke), nothing of ours stays but the data root.
  [[ -f "$STATE_DIR/started" ]] || rm -rf "$STATE_DIR" "$KUBE_NODE_RUN"
  ;;
*) echo "usage: $0 start|stop" >&2; exit 2 ;;
esac
