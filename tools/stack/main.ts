// `npm run stack`: the cluster topology on one machine (see stack.ts). Prints where everything is,
// echoes every child's log lines with its name, and on Ctrl-C or SIGTERM stops every child and
// removes its temp directory.

import { intVar } from '../../lib/common/config.ts';
import { startStack } from './stack.ts';

let port: number;
try {
  port = intVar(process.env, 'STACK_PORT', 8080, 0, 65535);
} catch (err) {
  console.error(`npm run stack: ${(err as Error).message}`);
  process.exit(2);
}

let stopping = false;
let stack: Awaited<ReturnType<typeof startStack>> | undefined;
const stop = async (signal: string) => {
  if (stopping) return;
  stopping = true;
  console.log(`[stack] ${signal}: stopping every child`);
  await stack?.stop();
  process.exit(0);
};
// Until startStack resolves, a signal is handled when it does (or fails).
process.once('SIGINT', () => void stop('SIGINT'));
process.once('SIGTERM', () => void stop('SIGTERM'));

try {
  stack = await startStack({ port, echo: true });
} catch (err) {
  console.error(`npm run stack: ${(err as Error).message}`);
  process.exit(1);
}
if (stopping) {
  await stack.stop();
  process.exit(0);
}

const s = stack;
console.log(`
nsfwdetector cluster stack is up (Envoy → quota ext_authz → detect / health, Redis, Jaeger)
  edge:     ${s.edgeUrl}
            curl -F file=@image.jpg ${s.edgeUrl}/api/public/detect
  traces:   ${s.jaegerUrl}  (Jaeger UI; API: ${s.jaegerUrl}/api/traces/<trace id>)
  metrics:  envoy  ${s.adminUrl}/stats/prometheus
            quota  ${s.serviceUrls.quota}/metrics
            detect ${s.serviceUrls.detect}/metrics
            health ${s.serviceUrls.health}/metrics
  redis:    ${s.redisUrl}
  pids:     ${s.pids().join(' ')}
  temp dir: ${s.dir}
Ctrl-C stops everything.
`);

for (const name of ['redis', 'jaeger', 'quota', 'detect', 'health', 'envoy'] as const) {
  void s.child(name).exited.then((code) => {
    if (!stopping) console.error(`[stack] ${name} exited (${code}); the stack is degraded, Ctrl-C to stop`);
  });
}
