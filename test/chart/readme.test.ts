// The chart README documents every value, generated from values.yaml (charts/nsfwdetector/readme/generate.ts), and is
// current.

import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { README_PATH, renderReadme, valueDocs } from '../../charts/nsfwdetector/readme/generate.ts';
import { CHART_DIR } from '../../tools/stack/render-envoy.ts';

const values = readFileSync(`${CHART_DIR}values.yaml`, 'utf8');

describe('chart README', () => {
  it('is current (regenerate: npx tsx charts/nsfwdetector/readme/generate.ts)', () => {
    expect(readFileSync(README_PATH, 'utf8')).toBe(renderReadme(values));
  });

  it('documents every value of values.yaml and the schema knows each', () => {
    const docs = valueDocs(values);
    expect(docs.length).toBeGreaterThan(60);
    for (const key of [
      'config.anonPerMinute',
      'redis.external.url',
      'envoy.xffNumTrustedHops',
      'operator.enabled',
    ]) {
      expect(docs.map((d) => d.key)).toContain(key);
    }
    const schema = JSON.parse(readFileSync(`${CHART_DIR}values.schema.json`, 'utf8'));
    for (const { key } of docs) {
      let node = schema;
      for (const part of key.split('.')) {
        node = node?.properties?.[part];
        if (node?.type === 'object' && !node.properties) break; // free-form maps (labels, annotations)
      }
      expect(node, `values.schema.json has no ${key}`).toBeDefined();
    }
  });

  it('refuses a key defined twice (YAML would keep the last silently)', () => {
    expect(() => valueDocs('# -- a\nimage:\n  tag: 1\n# -- b\nimage:\n  tag: 2\n')).toThrow(
      'image is defined twice',
    );
  });

  it('refuses a value without a description', () => {
    expect(() => renderReadme('undocumented: 1\n')).toThrow('no description for undocumented');
  });
});
