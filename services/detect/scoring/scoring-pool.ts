// Builds the scorer the configuration describes: worker threads with one ONNX session each, which
// decode ordinary images and infer every one, and decoder processes (one image each) for the others;
// the model from the checksummed file `npm run models` built: a missing or stale file fails here,
// before any worker starts.

import type { FastifyBaseLogger } from 'fastify';
import { inputSizeOf, modelMembers } from '../../../lib/common/model-catalogue.ts';
import type { ScoringConfig, UploadConfig } from '../config.ts';
import { libjpegUnavailable, resolveJpegDecoder } from '../image/libjpeg/jpeg-tensor.ts';
import { jpegFastPathServes } from '../model/family-drivers.ts';
import { verifiedModelFile } from '../model/model-file.ts';
import { DecoderPool } from './decoder-pool.ts';
import type { ImageScorer } from './image-scorer.ts';
import { RoutedScorer } from './routed-scorer.ts';
import type { ScorerSlot } from './scorer-slot.ts';
import { type WorkerPoolOptions, WorkerPoolScorer } from './worker-pool-scorer.ts';

/**
 * Images one worker decodes and infers at once; more images handed to the pool wait in its queue.
 * Measured at concurrency 8 on 2 cores: 3 beat 2 by ~11 %, 4 was no faster than 3 and kept more memory.
 */
export const MAX_JOBS_PER_WORKER = 3;

/** The scoring pool the configuration describes: MAX_ACTIVE_IMAGES spread over SCORING_WORKERS. */
export function scoringPoolOptions(
  config: ScoringConfig & Pick<UploadConfig, 'concurrency' | 'limits'>,
): WorkerPoolOptions {
  const workers = Math.min(config.scoringWorkers, config.concurrency.active);
  return {
    model: config.model,
    workers,
    jobsPerWorker: Math.min(MAX_JOBS_PER_WORKER, Math.ceil(config.concurrency.active / workers)),
    intraOpThreads: config.inferenceThreads,
    limits: config.limits,
    jpegDecoder: resolveJpegDecoder(config.jpegDecoder),
    maxTiles: config.maxTiles,
    pdq: config.hashLists.enabled,
    deadlineMs: config.scoringDeadlineMs,
  };
}

/**
 * For the boot log: the JPEG decoder in use and, when JPEG_DECODER=auto found no fast path, why (the
 * server logs that as a warning: it runs, at about twice the CPU per JPEG). The fast path makes only
 * the input of a single model whose family's driver says so (nsfwjs's): the others and ensembles decode
 * every JPEG with sharp.
 */
export function jpegDecoderInUse(config: ScoringConfig): { jpegDecoder: 'libjpeg' | 'sharp'; why?: string } {
  if (!jpegFastPathServes(modelMembers(config.model))) return { jpegDecoder: 'sharp' };
  const jpegDecoder = resolveJpegDecoder(config.jpegDecoder);
  const missing = config.jpegDecoder === 'auto' ? libjpegUnavailable() : undefined;
  return missing ? { jpegDecoder, why: missing } : { jpegDecoder };
}

/**
 * An inference that takes this long has lost its thread (a 224² tensor takes milliseconds): only then is
 * an inference worker terminated. Never SCORING_DEADLINE_MS: terminating a thread that runs an ONNX
 * session aborts the process, so no deadline that load alone can reach may do it.
 */
export const INFERENCE_DEADLINE_MS = 60_000;

export async function loadScorer(
  config: ScoringConfig & Pick<UploadConfig, 'concurrency' | 'limits'>,
  onWorkerError: (err: Error) => void,
): Promise<ImageScorer> {
  for (const model of modelMembers(config.model)) await verifiedModelFile(model);
  const options = scoringPoolOptions(config);
  const [inference, decoders] = await Promise.all([
    WorkerPoolScorer.create({ ...options, deadlineMs: INFERENCE_DEADLINE_MS, onWorkerError }),
    DecoderPool.create({
      processes: config.decoderProcesses,
      idleMs: config.decoderIdleMs,
      model: config.model,
      inputSize: inputSizeOf(config.model),
      limits: config.limits,
      jpegDecoder: options.jpegDecoder ?? 'sharp',
      deadlineMs: config.scoringDeadlineMs,
      cpuLimitMs: config.decodeCpuLimitMs,
      maxTiles: config.maxTiles,
      pdq: config.hashLists.enabled,
      maxFramesScored: config.maxFramesScored,
      onProcessError: onWorkerError,
    }),
  ]);
  return new RoutedScorer(decoders, inference, {
    maxPixels: config.inProcessMaxPixels,
    maxFramesScored: config.maxFramesScored,
  });
}

/**
 * Once the server listens: loads the model into the slot (`wrap` may meter the scorer) and logs it
 * with the JPEG decoder in use; a model that cannot load ends the process (exit 1) — a detect server
 * that can never score must not look alive.
 */
export async function fillScorerSlot(
  slot: ScorerSlot,
  config: ScoringConfig & Pick<UploadConfig, 'concurrency' | 'limits'>,
  log: FastifyBaseLogger,
  wrap: (scorer: ImageScorer) => ImageScorer = (scorer) => scorer,
): Promise<void> {
  try {
    const started = performance.now();
    const scorer = await loadScorer(config, (err) => log.error({ err }, 'scoring worker replaced'));
    slot.fill(wrap(scorer));
    const { jpegDecoder, why } = jpegDecoderInUse(config);
    if (why) log.warn(why);
    log.info(
      { model: config.model, jpegDecoder, ms: Math.round(performance.now() - started) },
      'model loaded',
    );
  } catch (err) {
    log.fatal({ err }, 'model failed to load');
    process.exit(1);
  }
}
