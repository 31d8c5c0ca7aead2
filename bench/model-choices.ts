// The bench's `models` section: what each MODEL choice costs through the real server — a single model of
// either family and an ensemble — on the bench's ~1 MP JPEGs at concurrency 8: requests per second,
// the server's CPU per image (its process tree's CPU time over the load) and its resident memory
// (peak, VmHWM of the server process, whose worker threads hold the sessions). One server at a time.
// Choices whose model file is missing (open_nsfw where npm install had no Python) are reported, not run.

import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import {
  MODELS,
  type ModelChoice,
  modelMembers,
  OFFERED_MODEL_NAMES,
} from '../lib/common/model-catalogue.ts';
import { MODELS_DIR } from '../services/detect/model/model-file.ts';
import { processTree } from '../test/support/process-tree.ts';
import { startServer } from '../test/support/server-process.ts';
import { closeLoadConnections, postOnce, runLoad } from './http-load.ts';
import { benchImages } from './images.ts';
import { treeCpuMs } from './peer.ts';

/** Every offered model, and the ensemble docs/models.md measures. */
export const BENCHED_CHOICES: readonly ModelChoice[] = [...OFFERED_MODEL_NAMES, 'mobilenet_v2+open_nsfw'];

const peakRssMiB = (pid: number): number =>
  Number(/VmHWM:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? 0) / 1024;

export async function modelChoicesSection(seconds: number): Promise<Array<[string, string]>> {
  const bodies = (await benchImages()).map((i) => i.jpeg);
  const lines: Array<[string, string]> = [];
  for (const choice of BENCHED_CHOICES) {
    const missing = modelMembers(choice).filter((m) => !existsSync(path.join(MODELS_DIR, MODELS[m].file)));
    if (missing.length > 0) {
      lines.push([
        `MODEL=${choice}`,
        `not run: ${missing.map((m) => `models/${MODELS[m].file}`).join(', ')} missing`,
      ]);
      continue;
    }
    const server = await startServer({
      MODEL: choice,
      ANON_PER_MINUTE: '1000000',
      ANON_PER_DAY: '1000000',
      LOG_LEVEL: 'warn',
    });
    try {
      const url = `${server.url}/api/public/detect`;
      for (const body of bodies) await postOnce(url, body, 'image/jpeg');
      const pid = server.proc.pid as number;
      const cpuBefore = treeCpuMs(processTree(pid));
      const load = await runLoad({ url, bodies, contentType: 'image/jpeg', concurrency: 8, seconds });
      const cpuMs = treeCpuMs(processTree(pid)) - cpuBefore;
      lines.push([
        `MODEL=${choice}`,
        `${load.perSecond.toFixed(1)} req/s, ${(cpuMs / Math.max(1, load.requests)).toFixed(1)} ms CPU per image, ` +
          `peak RSS ${peakRssMiB(pid).toFixed(0)} MiB, p50 ${load.p50.toFixed(0)} ms` +
          (load.failures ? `, ${load.failures} failed` : ''),
      ]);
    } finally {
      closeLoadConnections();
      await server.stop();
    }
  }
  return lines;
}
