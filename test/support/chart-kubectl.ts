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

/** The last five minutes of every gateway pod's quota container, each line prefixed with its pod. */
export const QUOTA_LOGS_ARGS = [
  'logs',
  '-l',
  'app.kubernetes.io/component=gateway',
  '-c',
  'quota',
  '--since=5m',
  '--prefix',
];
