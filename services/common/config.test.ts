// Configuration: defaults, refusal of bad values at boot, the scoring pool it describes, and a README
// row for every variable read.

import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { scoringPoolOptions } from '../detect/model/load.ts';
import { ConfigError, loadConfig } from './config.ts';

describe('loadConfig', () => {
  it('defaults to eight images in the pool over two scoring workers', () => {
    const config = loadConfig({});
    expect(config.concurrency.active).toBe(8);
    expect(config.scoringWorkers).toBe(2);
    expect(config.inferenceThreads).toBe(2);
  });

  it('refuses a bad value at once, naming the variable', () => {
    expect(() => loadConfig({ SCORING_WORKERS: '0' })).toThrow(ConfigError);
    expect(() => loadConfig({ SCORING_WORKERS: 'two' })).toThrow(/SCORING_WORKERS/);
    expect(() => loadConfig({ MAX_ACTIVE_IMAGES: '-1' })).toThrow(/MAX_ACTIVE_IMAGES/);
  });

  it('traces everything by default; TRACE_SAMPLE_RATIO is a share between 0 and 1', () => {
    expect(loadConfig({}).traceSampleRatio).toBe(1);
    expect(loadConfig({ TRACE_SAMPLE_RATIO: '0.1' }).traceSampleRatio).toBe(0.1);
    expect(() => loadConfig({ TRACE_SAMPLE_RATIO: '1.5' })).toThrow(/TRACE_SAMPLE_RATIO/);
    expect(() => loadConfig({ TRACE_SAMPLE_RATIO: 'all' })).toThrow(/TRACE_SAMPLE_RATIO/);
  });

  it('refuses a variable that no longer exists, naming what replaced it', () => {
    expect(() => loadConfig({ MAX_QUEUED_IMAGES: '0' })).toThrow(
      /MAX_QUEUED_IMAGES no longer exists: .*MAX_UPLOADS, MAX_UPLOADS_PER_CLIENT/,
    );
  });

  it('offers the float models; the quantised one only with ALLOW_UNSHIPPED_MODELS=true', () => {
    expect(loadConfig({}).model).toBe('mobilenet_v2');
    expect(loadConfig({ MODEL: 'inception_v3' }).model).toBe('inception_v3');
    // QUANTISED_MODEL_SHIPS is false: MODEL refuses mobilenet_v2_int8, saying why.
    expect(() => loadConfig({ MODEL: 'mobilenet_v2_int8' })).toThrow(
      /MODEL=mobilenet_v2_int8 is not offered: it missed its fidelity bound/,
    );
    expect(loadConfig({ MODEL: 'mobilenet_v2_int8', ALLOW_UNSHIPPED_MODELS: 'true' }).model).toBe(
      'mobilenet_v2_int8',
    );
    expect(() => loadConfig({ MODEL: 'resnet' })).toThrow(/MODEL must be one of mobilenet_v2, inception_v3/);
    expect(() => loadConfig({ ALLOW_UNSHIPPED_MODELS: 'yes' })).toThrow(/ALLOW_UNSHIPPED_MODELS/);
  });

  it('documents every variable it reads in the README', () => {
    const source = readFileSync(new URL('./config.ts', import.meta.url), 'utf8');
    const names = [...source.matchAll(/Var\(env, '([A-Z0-9_]+)'/g)].map((m) => m[1]);
    expect(names.length).toBeGreaterThan(20);
    const readme = readFileSync(new URL('../../README.md', import.meta.url), 'utf8');
    for (const name of names) expect(readme, name).toContain(`\`${name}\``);
  });
});

describe('scoringPoolOptions', () => {
  const pool = (env: Record<string, string>) => {
    const { workers, jobsPerWorker } = scoringPoolOptions(loadConfig(env));
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
