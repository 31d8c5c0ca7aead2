// The rate-limit service (rate-limit-service.ts) on a thread of its own: under a reconnecting flood
// Envoy asks once per new connection, thousands of times a second, and those calls must not delay the
// quota service's own event loop (ext_authz, the console). startRateLimitWorker starts it and resolves
// with its port once it listens; close() stops it.

import { extname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { isMainThread, parentPort, Worker, workerData } from 'node:worker_threads';
import { startRateLimitService } from './rate-limit-service.ts';
import { SourceConnectionLimiter, type SourceLimits } from './source-limit.ts';

interface Options {
  port: number;
  limits: SourceLimits;
  ipv6PrefixLength: number;
}

export interface RateLimitWorker {
  port: number;
  close(): Promise<void>;
}

export function startRateLimitWorker(options: Options): Promise<RateLimitWorker> {
  // This very file (.ts under tsx, .js when built), run as the worker.
  const self = new URL(`./rate-limit-worker${extname(fileURLToPath(import.meta.url))}`, import.meta.url);
  const worker = new Worker(self, { workerData: options });
  return new Promise((resolve, reject) => {
    worker.once('error', reject);
    worker.once('exit', (code) =>
      reject(new Error(`the rate-limit worker exited (${code}) before listening`)),
    );
    worker.once('message', (message: { port: number }) => {
      worker.removeAllListeners('exit');
      worker.removeListener('error', reject);
      resolve({
        port: message.port,
        close: async () => {
          const exited = new Promise<void>((done) => worker.once('exit', () => done()));
          worker.postMessage('close');
          await exited;
        },
      });
    });
  });
}

if (!isMainThread && parentPort && (workerData as Options | undefined)?.limits) {
  const { port, limits, ipv6PrefixLength } = workerData as Options;
  const service = await startRateLimitService(new SourceConnectionLimiter(limits, ipv6PrefixLength), port);
  const parent = parentPort;
  parent.on('message', async () => {
    await service.close();
    parent.close();
  });
  parent.postMessage({ port: service.port });
}
