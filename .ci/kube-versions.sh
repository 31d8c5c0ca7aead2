# The pinned versions of the Kubernetes tools and the local node's components: read by
# .ci/install-k8s-tools.sh, which builds them, and tools/kube-node/env.sh, which runs them.
# shellcheck shell=bash disable=SC2034
KUBE_VERSION=v1.37.2
ETCD_VERSION=v3.6.16
KUBECTL_WHEEL_VERSION=1.37.1
SKAFFOLD_VERSION=v2.16.1
CONTAINERD_VERSION=v2.4.2
COREDNS_VERSION=v1.15.0
KUBE_ROUTER_VERSION=v2.6.3-k3s1
METRICS_SERVER_VERSION=v0.9.0
REGISTRY_VERSION=v3.1.2
