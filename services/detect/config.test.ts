// The detect service's configuration: defaults, refusal of bad values at boot, and the scoring pool it
// describes.

import { describe, expect, it } from 'vitest';
import { loadQuotaConfig } from '../quota/config.ts';
import { loadDetectConfig, loadScoringConfig, loadUploadConfig } from './config.ts';
import { scoringPoolOptions } from './scoring/scoring-pool.ts';

describe('loadDetectConfig', () => {
  it('defaults to eight images in the pool over two scoring workers', () => {
    const config = loadDetectConfig({});
    expect(config.concurrency.active).toBe(8);
    expect(config.scoringWorkers).toBe(2);
    expect(config.inferenceThreads).toBe(2);
  });

  it('refuses a bad value at once, naming the variable', () => {
    expect(() => loadDetectConfig({ SCORING_WORKERS: '0' })).toThrow(/SCORING_WORKERS/);
    expect(() => loadDetectConfig({ SCORING_WORKERS: 'two' })).toThrow(/SCORING_WORKERS/);
    expect(() => loadDetectConfig({ MAX_ACTIVE_IMAGES: '-1' })).toThrow(/MAX_ACTIVE_IMAGES/);
    expect(() => loadDetectConfig({ DETECT_PORT: '70000' })).toThrow(/DETECT_PORT/);
    expect(() => loadDetectConfig({ EDGE_SECRET: 'short' })).toThrow(/EDGE_SECRET must be at least 16/);
  });

  it('refuses a variable that no longer exists, naming what replaced it', () => {
    expect(() => loadUploadConfig({ MAX_QUEUED_IMAGES: '0' })).toThrow(
      /MAX_QUEUED_IMAGES no longer exists: .*MAX_UPLOADS, MAX_UPLOADS_PER_CLIENT/,
    );
  });

  it('offers the float models and open_nsfw; the quantised one only with ALLOW_UNSHIPPED_MODELS=true', () => {
    expect(loadScoringConfig({}).model).toBe('mobilenet_v2');
    expect(loadScoringConfig({ MODEL: 'inception_v3' }).model).toBe('inception_v3');
    expect(loadScoringConfig({ MODEL: 'open_nsfw' }).model).toBe('open_nsfw');
    // QUANTISED_MODEL_SHIPS is false: MODEL refuses mobilenet_v2_int8, saying why.
    expect(() => loadScoringConfig({ MODEL: 'mobilenet_v2_int8' })).toThrow(
      /MODEL=mobilenet_v2_int8 is not offered: it missed its fidelity bound/,
    );
    expect(loadScoringConfig({ MODEL: 'mobilenet_v2_int8', ALLOW_UNSHIPPED_MODELS: 'true' }).model).toBe(
      'mobilenet_v2_int8',
    );
    expect(() => loadScoringConfig({ MODEL: 'resnet' })).toThrow(
      /MODEL must be one of mobilenet_v2, inception_v3/,
    );
    expect(() => loadScoringConfig({ ALLOW_UNSHIPPED_MODELS: 'yes' })).toThrow(/ALLOW_UNSHIPPED_MODELS/);
    expect(() => loadScoringConfig({ JPEG_DECODER: 'gif' })).toThrow(/JPEG_DECODER must be one of/);
  });

  it('takes an ensemble of offered models joined by +, each named once', () => {
    expect(loadScoringConfig({ MODEL: 'mobilenet_v2+open_nsfw' }).model).toBe('mobilenet_v2+open_nsfw');
    expect(loadScoringConfig({ MODEL: 'open_nsfw+inception_v3+mobilenet_v2' }).model).toBe(
      'open_nsfw+inception_v3+mobilenet_v2',
    );
    expect(() => loadScoringConfig({ MODEL: 'mobilenet_v2+resnet' })).toThrow(
      /MODEL=mobilenet_v2\+resnet: an ensemble joins offered models with \+, but "resnet" is not one of mobilenet_v2, inception_v3, open_nsfw/,
    );
    expect(() => loadScoringConfig({ MODEL: 'open_nsfw+' })).toThrow(/but "" is not one of/);
    expect(() => loadScoringConfig({ MODEL: 'open_nsfw+open_nsfw' })).toThrow(/names each model once/);
    expect(() => loadScoringConfig({ MODEL: 'mobilenet_v2_int8+open_nsfw' })).toThrow(
      /MODEL=mobilenet_v2_int8\+open_nsfw is not offered: mobilenet_v2_int8 missed its fidelity bound/,
    );
    expect(
      loadScoringConfig({ MODEL: 'mobilenet_v2_int8+open_nsfw', ALLOW_UNSHIPPED_MODELS: 'true' }).model,
    ).toBe('mobilenet_v2_int8+open_nsfw');
  });

  it('is read by detect only: the quota process ignores the model and the scoring variables', () => {
    const env = { MODEL: 'resnet', JPEG_DECODER: 'gif', SCORING_WORKERS: '0', MAX_ACTIVE_IMAGES: '-1' };
    expect(() => loadDetectConfig(env)).toThrow();
    expect(loadQuotaConfig(env).quotaPort).toBe(8081);
  });
});

describe('scoringPoolOptions', () => {
  const pool = (env: Record<string, string>) => {
    const { workers, jobsPerWorker } = scoringPoolOptions(loadDetectConfig(env));
    return { workers, jobsPerWorker };
  };

  it('spreads the active images over the workers', () => {
    expect(pool({ MAX_ACTIVE_IMAGES: '4' })).toEqual({ workers: 2, jobsPerWorker: 2 });
    expect(pool({ MAX_ACTIVE_IMAGES: '5' })).toEqual({ workers: 2, jobsPerWorker: 3 });
    // Past three per worker the rest wait in the pool's queue.
    expect(pool({})).toEqual({ workers: 2, jobsPerWorker: 3 });
    expect(pool({ MAX_ACTIVE_IMAGES: '64' })).toEqual({ workers: 2, jobsPerWorker: 3 });
  });

  it('never starts more workers than images may be in flight', () => {
    expect(pool({ MAX_ACTIVE_IMAGES: '1' })).toEqual({ workers: 1, jobsPerWorker: 1 });
    expect(pool({ MAX_ACTIVE_IMAGES: '3', SCORING_WORKERS: '8' })).toEqual({ workers: 3, jobsPerWorker: 1 });
  });
});
