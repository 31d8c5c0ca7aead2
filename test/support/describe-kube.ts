// `describe` for suites that need the real Kubernetes API server (kube-apiserver, etcd, kubectl …) and
// Helm: describeWithTool with those tools, so a skipped suite is counted in the run's summary.

import type { KubeTool } from './kube-apiserver.ts';
import { describeWithTool, HELM, KUBE_TOOLS, type Tool } from './tools.ts';

/** `also`: further tools the suite needs (e.g. redis-server). */
export function describeWithKube(
  name: string,
  tools: readonly KubeTool[],
  body: () => void,
  also: readonly Tool[] = [],
): void {
  describeWithTool([...tools.map((t) => KUBE_TOOLS[t]), HELM, ...also], name, body);
}
