#!/usr/bin/env bash
# The node's certificates, once (kube:down deletes them with the rest): a CA, the apiserver's serving
# certificate, one admin client in system:masters that every component uses (a throwaway node), the
# front-proxy client for the aggregated metrics API, the service-account key pair, admin.kubeconfig.
set -euo pipefail
. "$(dirname "$0")/env.sh"
mkdir -p "$PKI_DIR"
cd "$PKI_DIR"
[[ -f admin.kubeconfig ]] && exit 0
ssl() { openssl "$@" 2>/dev/null; }
ssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 365 -subj "/CN=nsfwdetector-node-ca"
# sign NAME SUBJECT EXTENSIONS
sign() {
  ssl req -newkey rsa:2048 -nodes -keyout "$1.key" -out "$1.csr" -subj "$2"
  printf '%s\n' "$3" >"$1.ext"
  ssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -out "$1.crt" -days 365 -extfile "$1.ext"
  rm -f "$1.csr" "$1.ext"
}
sign apiserver /CN=kube-apiserver "subjectAltName=IP:$NODE_IP,IP:10.96.0.1,IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local
extendedKeyUsage=serverAuth"
sign admin "/O=system:masters/CN=admin" extendedKeyUsage=clientAuth
sign front-proxy /CN=front-proxy-client extendedKeyUsage=clientAuth
ssl genrsa -out sa.key 2048
ssl rsa -in sa.key -pubout -out sa.pub
cat >admin.kubeconfig.tmp <<KC
apiVersion: v1
kind: Config
clusters:
  - name: nsfwdetector-node
    cluster: {server: "https://$NODE_IP:6443", certificate-authority: "$PKI_DIR/ca.crt"}
users:
  - name: admin
    user: {client-certificate: "$PKI_DIR/admin.crt", client-key: "$PKI_DIR/admin.key"}
contexts:
  - name: nsfwdetector-node
    context: {cluster: nsfwdetector-node, user: admin}
current-context: nsfwdetector-node
KC
mv admin.kubeconfig.tmp admin.kubeconfig
