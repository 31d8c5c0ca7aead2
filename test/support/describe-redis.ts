// Kept for branches written before describeWithTool: use `describeWithTool(REDIS_SERVER, …)` (tools.ts).

import { describeWithTool, REDIS_SERVER } from './tools.ts';

/** @deprecated `describeWithTool(REDIS_SERVER, name, body)`. */
export function describeRedis(name: string, body: () => void): void {
  describeWithTool(REDIS_SERVER, name, body);
}
