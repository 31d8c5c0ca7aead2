// The shared core of the configuration, the refusal of bad values at boot, and a row of the
// configuration reference (docs/configuration.md) for every variable any process reads.

import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ConfigError, intSetting, loadCoreConfig } from './config.ts';
import { SETTINGS } from './settings.ts';

describe('loadCoreConfig', () => {
  it('traces everything by default; TRACE_SAMPLE_RATIO is a share between 0 and 1', () => {
    expect(loadCoreConfig({}).traceSampleRatio).toBe(1);
    expect(loadCoreConfig({ TRACE_SAMPLE_RATIO: '0.1' }).traceSampleRatio).toBe(0.1);
    expect(() => loadCoreConfig({ TRACE_SAMPLE_RATIO: '1.5' })).toThrow(/TRACE_SAMPLE_RATIO/);
    expect(() => loadCoreConfig({ TRACE_SAMPLE_RATIO: 'all' })).toThrow(ConfigError);
  });

  it('refuses a drain (SHUTDOWN_DELAY_MS) not shorter than the grace (SHUTDOWN_GRACE_MS), naming both', () => {
    const message =
      'SHUTDOWN_DELAY_MS must be less than SHUTDOWN_GRACE_MS (the drain is part of the grace period), got 5000 and 5000';
    expect(() => loadCoreConfig({ SHUTDOWN_DELAY_MS: '5000', SHUTDOWN_GRACE_MS: '5000' })).toThrow(message);
    expect(() => loadCoreConfig({ SHUTDOWN_DELAY_MS: '60000', SHUTDOWN_GRACE_MS: '1000' })).toThrow(
      ConfigError,
    );
    expect(loadCoreConfig({ SHUTDOWN_DELAY_MS: '4999', SHUTDOWN_GRACE_MS: '5000' })).toMatchObject({
      shutdownDelayMs: 4999,
      shutdownGraceMs: 5000,
    });
    // The defaults agree with each other.
    expect(() => loadCoreConfig({})).not.toThrow();
  });

  it('reads no service variable: a bad MODEL or JPEG_DECODER is not its concern', () => {
    expect(() =>
      loadCoreConfig({ MODEL: 'resnet', JPEG_DECODER: 'gif', SCORING_WORKERS: '0' }),
    ).not.toThrow();
  });
});

describe('configuration files', () => {
  const root = new URL('../../', import.meta.url);
  const sources = ['services', 'lib', 'tools'].flatMap((top) =>
    (readdirSync(new URL(`${top}/`, root), { recursive: true }) as string[])
      .filter((f) => /(^|\/)(config|policy-config)\.ts$/.test(f))
      .map((f) => readFileSync(new URL(join(top, f), root), 'utf8')),
  );

  it('documents every variable they read in a row of docs/configuration.md', () => {
    const names = sources.flatMap((source) => [
      ...[...source.matchAll(/(?:Var|Setting)\(env, '([A-Z0-9_]+)'/g)].map((m) => m[1]),
      ...[...source.matchAll(/windowVars\(env, '([A-Z0-9]+)'/g)].flatMap((m) => [
        `${m[1]}_PER_MINUTE`,
        `${m[1]}_PER_DAY`,
      ]),
    ]);
    expect(names.length).toBeGreaterThan(40);
    const reference = readFileSync(new URL('docs/configuration.md', root), 'utf8');
    for (const name of names) expect(reference, name).toContain(`\n| \`${name}\` |`);
  });

  it('reads nothing the settings table does not declare (lib/common/settings.ts)', () => {
    const declared = new Set(Object.keys(SETTINGS));
    const read = sources.flatMap((source) => [
      ...[...source.matchAll(/Var\(env, '([A-Z0-9_]+)'/g)].map((m) => m[1] as string),
    ]);
    expect(read.filter((name) => !declared.has(name))).toEqual([]);
  });
});

describe('the settings table', () => {
  it("is what the readers apply: its default, and its range in the refusal's message", () => {
    expect(intSetting({}, 'SHUTDOWN_DELAY_MS')).toBe(0);
    expect(intSetting({ SHUTDOWN_DELAY_MS: '60000' }, 'SHUTDOWN_DELAY_MS')).toBe(60_000);
    expect(() => intSetting({ SHUTDOWN_DELAY_MS: '90000' }, 'SHUTDOWN_DELAY_MS')).toThrow(
      'SHUTDOWN_DELAY_MS must be between 0 and 60000, got 90000',
    );
    expect(() => intSetting({ SHUTDOWN_GRACE_MS: '2147483648' }, 'SHUTDOWN_GRACE_MS')).toThrow(
      'SHUTDOWN_GRACE_MS must be between 0 and 2147483647, got 2147483648',
    );
  });

  it("holds the spec's numbers (part 8) as the defaults", () => {
    const defaults = Object.fromEntries(
      (
        [
          'ANON_PER_MINUTE',
          'ANON_PER_DAY',
          'FREE_PER_MINUTE',
          'FREE_PER_DAY',
          'PRO_PER_MINUTE',
          'PRO_PER_DAY',
          'MAX_FILE_BYTES',
        ] as const
      ).map((name) => [name, SETTINGS[name].default]),
    );
    expect(defaults).toEqual({
      ANON_PER_MINUTE: 10,
      ANON_PER_DAY: 30,
      FREE_PER_MINUTE: 10,
      FREE_PER_DAY: 100,
      PRO_PER_MINUTE: 30,
      PRO_PER_DAY: 10_000,
      MAX_FILE_BYTES: 52_428_800,
    });
  });
});
