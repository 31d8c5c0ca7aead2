#!/usr/bin/env bash
# The node's facts as JSON, for the test suites (test/support/kube-node.ts): paths, names, the binaries
# whether each is built, and whether a build of the missing ones is under way. Changes nothing.
set -euo pipefail
. "$(dirname "$0")/env.sh"
missing=()
for b in "${NODE_BINARIES[@]}"; do [[ -x "$b" ]] || missing+=("$b"); done
building=$(bash "$REPO_DIR/.ci/install-k8s-tools.sh" --building)
python3 - "$building" "$KUBE_NODE_DIR" "$KUBE_NODE_RUN" "$STATE_DIR" "$KUBECONFIG" "$KUBECTL" "$BRIDGE" "$REGISTRY" \
  "$NODE_NAME" "$CONTAINERD_SOCK" "$DOCKER_DATA" "$PAUSE_IMAGE" "${#NODE_BINARIES[@]}" "${NODE_BINARIES[@]}" \
  "${missing[@]+"${missing[@]}"}" <<'PY'
import json, sys
building = sys.argv[1] == "true"
a = sys.argv[2:]
n = int(a[11])
keys = ["nodeDir", "runDir", "stateDir", "kubeconfig", "kubectl", "bridge", "registry", "nodeName",
        "containerdSocket", "dockerData", "pauseImage"]
facts = dict(zip(keys, a[:11]))
facts["binaries"] = a[12:12 + n]
facts["missing"] = a[12 + n:]
facts["building"] = building
print(json.dumps(facts))
PY
