// kubectl arguments the node suites and the release check share, for whichever kubectl they run.

/** Runs the admin CLI in a gateway pod's quota container (it has the Redis the chart runs), answering JSON. */
export function adminCliArgs(release: string, args: readonly string[]): string[] {
  return [
    'exec',
    `deploy/${release}-gateway`,
    '-c',
    'quota',
    '--',
    'node',
    'dist/services/admin/cli.js',
    ...args,
    '--json',
  ];
}

/** The namespace's events, oldest first, a line each: when, what, why. */
export const EVENTS_ARGS = [
  'get',
  'events',
  '--sort-by=.lastTimestamp',
  '-o',
  'custom-columns=AT:.lastTimestamp,OBJECT:.involvedObject.name,REASON:.reason,MESSAGE:.message',
];

/**
 * The last five minutes of one container of every gateway pod, each line prefixed with its pod: `envoy`
 * (its access log: JSON lines) or `quota`.
 */
export const gatewayLogsArgs = (container: 'envoy' | 'quota') => [
  'logs',
  '-l',
  'app.kubernetes.io/component=gateway',
  '-c',
  container,
  '--since=5m',
  '--prefix',
];

/**
 * What the node says of a wait that timed out, for a namespace: node conditions other than Ready that
 * hold (disk, memory or PID pressure) and taints, every pod not Ready and why, and the namespace's events.
 * Each entry: a title and kubectl's arguments.
 */
function waitReportArgs(namespace: string): [string, string[]][] {
  return [
    [
      'nodes',
      [
        'get',
        'nodes',
        '-o',
        'custom-columns=NODE:.metadata.name,CONDITIONS:.status.conditions[?(@.status=="True")].type,TAINTS:.spec.taints[*].key',
      ],
    ],
    [
      `pods of ${namespace}`,
      [
        '-n',
        namespace,
        'get',
        'pods',
        '-o',
        'custom-columns=POD:.metadata.name,PHASE:.status.phase,NODE:.spec.nodeName,READY:.status.containerStatuses[*].ready,WAITING:.status.containerStatuses[*].state.waiting.reason,WHY:.status.conditions[?(@.status=="False")].message',
      ],
    ],
    [`events of ${namespace}`, ['-n', namespace, ...EVENTS_ARGS]],
  ];
}

/** `wait`'s result; when it fails, its error with the node's report (waitReportArgs) run by `kubectl`. */
export async function reportingWait<T>(
  wait: Promise<T>,
  kubectl: (args: string[]) => Promise<string>,
  namespace: string,
): Promise<T> {
  try {
    return await wait;
  } catch (err) {
    const parts = await Promise.all(
      waitReportArgs(namespace).map(async ([title, args]) => {
        const out = await kubectl(args).catch((e: Error) => `(kubectl failed: ${e.message})`);
        return `${title}:\n${out}`;
      }),
    );
    throw new Error(`${(err as Error).message}\n${parts.join('\n')}`);
  }
}
