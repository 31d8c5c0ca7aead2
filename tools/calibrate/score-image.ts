// One file through the server's own detect pipeline, in process: the same sniff, header probe and
// limits, decode and model the detect route uses (services/detect), so a calibrated threshold means
// what it will mean in production. Every refusal is the API's own error code.

import { readFile, stat } from 'node:fs/promises';
import type { Env } from '../../lib/common/config.ts';
import { ApiError, isApiError } from '../../lib/common/errors.ts';
import { loadPolicyConfig, type PolicyConfig } from '../../lib/policy/policy-config.ts';
import {
  loadScoringConfig,
  loadUploadConfig,
  type ScoringConfig,
  type UploadConfig,
} from '../../services/detect/config.ts';
import { probeHeader } from '../../services/detect/image/probe.ts';
import { sniffFormat } from '../../services/detect/image/sniff.ts';
import { summarize } from '../../services/detect/model/classifier.ts';
import { createOnnxClassifier } from '../../services/detect/model/onnx-classifier.ts';
import { InProcessScorer } from '../../services/detect/scoring/image-scorer.ts';

export type ScoreOutcome = { nsfw: number } | { code: number; message: string };

export interface FileScorer {
  score(file: string): Promise<ScoreOutcome>;
  /** Bytes already in memory, through the same checks as a file after its size. */
  scoreBytes(bytes: Uint8Array): Promise<ScoreOutcome>;
  close(): Promise<void>;
}

/** What calibration reads: the detect pipeline's limits and model, and the default upload limit. */
export type CalibrateConfig = ScoringConfig & UploadConfig & PolicyConfig;

export function loadCalibrateConfig(env: Env): CalibrateConfig {
  return { ...loadPolicyConfig(env), ...loadUploadConfig(env), ...loadScoringConfig(env) };
}

export async function createFileScorer(config: CalibrateConfig): Promise<FileScorer> {
  const classifier = await createOnnxClassifier({
    model: config.model,
    intraOpThreads: config.inferenceThreads,
  });
  // Margins and tiles as the server's decoder processes lay the frame out, so the scores are the server's.
  const scorer = new InProcessScorer(classifier, config.limits, undefined, config.maxTiles);
  const tooLarge = () =>
    new ApiError('FILE_TOO_LARGE', `File too large: the limit is ${config.maxFileBytes} bytes`);
  const scoreBytes = async (bytes: Uint8Array): Promise<ScoreOutcome> => {
    try {
      if (bytes.byteLength > config.maxFileBytes) throw tooLarge();
      const format = await sniffFormat(bytes);
      const probed = probeHeader(bytes, format, config.limits);
      const scored = await scorer.score(bytes, probed);
      return { nsfw: Math.min(1, Math.max(0, summarize(scored.scores, config.model).nsfw)) };
    } catch (err) {
      if (isApiError(err)) return { code: err.code, message: err.message };
      throw err;
    }
  };
  return {
    async score(file) {
      // Checked before reading, like the server's Content-Length check: an oversize file is never held.
      const { size } = await stat(file);
      if (size > config.maxFileBytes) {
        const err = tooLarge();
        return { code: err.code, message: err.message };
      }
      return scoreBytes(await readFile(file));
    },
    scoreBytes,
    close: () => scorer.close(),
  };
}
