import { describe, expect, it } from 'vitest';
import { isNodeProcess } from './kube-node.ts';

const facts = {
  binaries: [
    '/tools/bin/kubelet-v1.37.2',
    '/tools/bin/kube-proxy-v1.37.2',
    '/tools/bin/kube-apiserver-v1.37.2',
    '/usr/sbin/runc',
  ],
  nodeDir: '/tools/kube-node',
  runDir: '/run/nsfwdetector-kube-node',
};

describe('which processes are the node (the leftover check before kube:up and after kube:down)', () => {
  it.for([
    '/tools/bin/kube-proxy-v1.37.2 --config=/tools/kube-node/conf/kube-proxy.yaml',
    "sh -c mount --make-private /proc exec '/tools/bin/kubelet-v1.37.2' --config='/x/kubelet.yaml'",
    'containerd-shim-runc-v2 -namespace k8s.io -address /run/nsfwdetector-kube-node/containerd.sock',
    'dockerd --exec-root=/tools/kube-node/docker-exec',
    'something --paths=/a,/tools/kube-node',
  ])('counts %s', (cmdline) => {
    expect(isNodeProcess(facts, cmdline)).toBe(true);
  });

  it.for([
    // The background build of a missing binary, while the suite waits for it.
    'go build -trimpath -o /tools/bin/kube-proxy-v1.37.2.tmp -ldflags -s -w ./cmd/kube-proxy',
    '/tools/bin/kube-apiserver-v1.37.2 --etcd-servers=http://127.0.0.1:2379',
    '/usr/sbin/runc --version',
    'ls /tools/kube-node-docker /run/nsfwdetector-kube-node-other',
  ])('does not count %s', (cmdline) => {
    expect(isNodeProcess(facts, cmdline)).toBe(false);
  });
});
