// `describe` for suites that need the stack's external tools (Envoy, Helm, Jaeger, promtool, k6, and
// redis-server): describeWithTool with those tools, so a skipped suite is counted in the run's summary.

import type { Tool as StackTool } from '../../tools/stack/tools.ts';
import { describeWithTool, ENVOY, HELM, JAEGER, K6, PROMTOOL, REDIS_SERVER, type Tool } from './tools.ts';

/** The stack's tools, found where tools/stack/tools.ts looks (overrides, the tools cache, PATH). */
export const STACK_TOOLS = {
  envoy: ENVOY,
  helm: HELM,
  jaeger: JAEGER,
  promtool: PROMTOOL,
  k6: K6,
} as const satisfies Record<StackTool, Tool>;

export function describeWithStackTools(
  name: string,
  tools: readonly StackTool[],
  opts: { redis?: boolean },
  body: () => void,
): void {
  describeWithTool([...tools.map((t) => STACK_TOOLS[t]), ...(opts.redis ? [REDIS_SERVER] : [])], name, body);
}
