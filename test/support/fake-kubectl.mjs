// A stand-in kubectl for loadtests/soak-sampler.ts's test: `get pods … -o json` answers the pods in
// FAKE_KUBECTL_PODS (a JSON array of {name, ip, component, restarts}) matching the component of the
// label selector; `exec <pod> -c <container> -- node -e <script> <args…>` runs that script here, with
// this Node, as the pod would.

import { spawnSync } from 'node:child_process';

const args = process.argv.slice(2);
const pods = JSON.parse(process.env.FAKE_KUBECTL_PODS ?? '[]');
if (args.includes('get')) {
  const selector = args[args.indexOf('-l') + 1] ?? '';
  const component = /app\.kubernetes\.io\/component=([\w-]+)/.exec(selector)?.[1];
  const items = pods
    .filter((p) => p.component === component)
    .map((p) => ({
      metadata: { name: p.name },
      status: {
        phase: 'Running',
        podIP: p.ip,
        containerStatuses: [
          { name: component === 'gateway' ? 'quota' : component, ready: true, restartCount: p.restarts ?? 0 },
        ],
      },
    }));
  console.log(JSON.stringify({ items }));
} else if (args.includes('exec')) {
  const command = args.slice(args.indexOf('--') + 1);
  if (command[0] !== 'node') throw new Error(`fake kubectl runs only node, not ${command[0]}`);
  const run = spawnSync(process.execPath, command.slice(1), { stdio: ['ignore', 'inherit', 'inherit'] });
  process.exit(run.status ?? 1);
} else {
  console.error(`fake kubectl: unsupported ${args.join(' ')}`);
  process.exit(2);
}
