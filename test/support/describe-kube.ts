// `describe` for suites that need the real Kubernetes API server (kube-apiserver, etcd, kubectl …) and
// Helm: describeWithTool with those tools, so a skipped suite is counted in the run's summary.

import { KUBE_INSTALL_HINT, type KubeTool, kubeToolPath } from './kube-apiserver.ts';
import { STACK_TOOLS } from './stack-tools.ts';
import { describeWithTool, type Tool } from './tools.ts';

const kubeTool = (name: KubeTool): Tool => ({
  name,
  install: KUBE_INSTALL_HINT,
  find: () => kubeToolPath(name),
});

/** `also`: further tools the suite needs (e.g. redis-server). */
export function describeWithKube(
  name: string,
  tools: readonly KubeTool[],
  body: () => void,
  also: readonly Tool[] = [],
): void {
  describeWithTool([...tools.map(kubeTool), STACK_TOOLS.helm, ...also], name, body);
}
