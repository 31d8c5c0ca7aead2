// `describe` for suites that need the stack's external tools (Envoy, Helm, Jaeger, promtool, k6, and
// redis-server): describeWithTool with those tools, so a skipped suite is counted in the run's summary.

import { INSTALL_HINT, type Tool as StackTool, toolPath } from '../../services/stack/tools.ts';
import { describeWithTool, REDIS_SERVER, type Tool } from './tools.ts';

const stackTool = (name: StackTool): Tool => ({ name, install: INSTALL_HINT, find: () => toolPath(name) });

/** The stack's tools as found where services/stack/tools.ts looks (the tools cache, overrides, PATH). */
export const STACK_TOOLS = {
  envoy: stackTool('envoy'),
  helm: stackTool('helm'),
  jaeger: stackTool('jaeger'),
  promtool: stackTool('promtool'),
  k6: stackTool('k6'),
} as const satisfies Record<StackTool, Tool>;

export function describeWithStackTools(
  name: string,
  tools: readonly StackTool[],
  opts: { redis?: boolean },
  body: () => void,
): void {
  describeWithTool([...tools.map((t) => STACK_TOOLS[t]), ...(opts.redis ? [REDIS_SERVER] : [])], name, body);
}
