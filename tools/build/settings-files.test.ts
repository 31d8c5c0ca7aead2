// The files generated from the settings table are current (CI: drift fails the build), a hand edit of
// any generated part is caught while the hand-written parts stay free, and what they say agrees with
// the spec: no defaults of its own in the CRD, the spec's numbers in the chart and the example policy,
// the code's ranges in the chart's schema.

import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { SETTINGS } from '../../lib/common/settings.ts';
import { helm, removeHelmHome, sets } from '../../test/chart/helm.ts';
import { describeWithTool, HELM } from '../../test/support/tools.ts';
import { GENERATED, type GeneratedFile, ROOT, staleFiles } from './settings-files.ts';

const read = (file: string) => readFileSync(`${ROOT}${file}`, 'utf8');

/** staleFiles as if `file` held `edit(its text)`. */
const staleAfter = (file: string, edit: (text: string) => string) =>
  staleFiles((f) => (f === file ? edit(read(f)) : read(f)));

describe('the generated files', () => {
  it('are current (regenerate: npm run settings)', () => {
    expect(staleFiles()).toEqual([]);
  });

  it('`npm run settings -- --check` exits 0 on this tree', async () => {
    const { stderr } = await promisify(execFile)(
      process.execPath,
      ['--import', 'tsx', 'tools/build/generate-settings.ts', '--check'],
      { cwd: ROOT },
    );
    expect(stderr).toBe('');
  });

  it('are found stale when a generated part is edited by hand', () => {
    const edits: Record<GeneratedFile, [string, string]> = {
      values: ['  anonPerDay: 30\n', '  anonPerDay: 100\n'],
      schema: [
        '"shutdownDelayMs": {\n          "type": "integer",\n          "minimum": 0,\n          "maximum": 60000\n',
        '"shutdownDelayMs": {\n          "type": "integer",\n          "minimum": 0,\n          "maximum": 600000\n',
      ],
      workloads: ['{{ $c.anonPerDay | int64 | quote }}', '{{ 100 | quote }}'],
      derived: ['1048576', '2097152'],
      crd: ['minimum: 0', 'minimum: 1'],
      docs: ['| `ANON_PER_DAY` | `30` |', '| `ANON_PER_DAY` | `100` |'],
      chartReadme: ['| `config.anonPerDay` | `30` |', '| `config.anonPerDay` | `100` |'],
    };
    for (const [key, [from, to]] of Object.entries(edits) as Array<[GeneratedFile, [string, string]]>) {
      const file = GENERATED[key];
      expect(read(file), `${file} holds ${from}`).toContain(from);
      expect(
        staleAfter(file, (t) => t.replace(from, to)),
        file,
      ).toContain(key);
    }
  });

  it('leave the hand-written parts of the chart free', () => {
    const edited = (t: string) => t.replace('  replicas: 2\n', '  replicas: 3\n');
    expect(edited(read(GENERATED.values))).not.toBe(read(GENERATED.values));
    // The chart README follows values.yaml: it is the one stale file.
    expect(staleAfter(GENERATED.values, edited)).toEqual(['chartReadme']);
  });
});

describe('the DetectionPolicy CRD', () => {
  const crd = read(GENERATED.crd);

  it('declares no default: what a policy leaves out is not filled in by the API server', () => {
    expect(crd).not.toMatch(/\bdefault:/);
  });

  it('names the models as MODEL does', () => {
    expect(crd).toContain(
      'pattern: "^(mobilenet_v2|inception_v3|open_nsfw)(\\\\+(mobilenet_v2|inception_v3|open_nsfw))*$"',
    );
    expect(crd).not.toMatch(/MobileNetV2|InceptionV3/);
  });

  it('says quotas are per account, not per key', () => {
    expect(crd).not.toMatch(/per key/i);
    expect(crd).toContain('Free-tier requests per minute, per account');
  });
});

describe('the example DetectionPolicy', () => {
  const example = read('charts/nsfwdetector/examples/detectionpolicy.yaml');

  it("shows the spec's numbers for every limit it mentions, and a model spelt as MODEL spells it", () => {
    const pairs = [...example.matchAll(/(anonymous|free|pro):\s*\{ perMinute: (\d+), perDay: ([\d_]+) \}/g)];
    expect(pairs.map((m) => m[1])).toEqual(['anonymous', 'free', 'pro']);
    const limits = Object.fromEntries(pairs.map((m) => [m[1], [Number(m[2]), Number(m[3])]]));
    expect(limits).toEqual({
      anonymous: [SETTINGS.ANON_PER_MINUTE.default, SETTINGS.ANON_PER_DAY.default],
      free: [SETTINGS.FREE_PER_MINUTE.default, SETTINGS.FREE_PER_DAY.default],
      pro: [SETTINGS.PRO_PER_MINUTE.default, SETTINGS.PRO_PER_DAY.default],
    });
    expect(limits).toEqual({ anonymous: [10, 30], free: [10, 100], pro: [30, 10_000] });
    expect(example).toMatch(/^ {2}model: mobilenet_v2$/m);
    expect(example).toContain(`# maxFramesScored: ${SETTINGS.MAX_FRAMES_SCORED.default} `);
  });
});

describeWithTool([HELM], 'the chart schema from the table', () => {
  it("refuses what the services would refuse at boot (SHUTDOWN_DELAY_MS above the code's 60 s)", async () => {
    try {
      const chart = `${ROOT}charts/nsfwdetector`;
      const over = await helm(['template', 'x', chart, ...sets({ 'config.shutdownDelayMs': 90_000 })]);
      expect(over.code).not.toBe(0);
      expect(over.stderr).toContain('/config/shutdownDelayMs');
      const at = await helm([
        'template',
        'x',
        chart,
        // The grace above it: a drain must end within the grace (test/chart/boot-values.test.ts).
        ...sets({ 'config.shutdownDelayMs': 60_000, 'config.shutdownGraceMs': 90_000 }),
      ]);
      expect(at.code, at.stderr).toBe(0);
      expect(at.stdout).toContain('{ name: SHUTDOWN_DELAY_MS, value: "60000" }');
    } finally {
      removeHelmHome();
    }
  });
});
