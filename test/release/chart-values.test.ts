// The released chart's values (tools/release/chart-values.ts): the chart's own values.yaml with its
// images set by digest, every comment kept, and what helm then renders.

import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { setValues } from '../../tools/release/chart-values.ts';
import { REPO } from '../support/paths.ts';

const VALUES = readFileSync(join(REPO, 'charts/nsfwdetector/values.yaml'), 'utf8');
const DIGEST = `sha256:${'a'.repeat(64)}`;

describe("the released chart's image values", () => {
  it("sets the three images by path in the chart's values.yaml, nothing else changed", () => {
    const out = setValues(VALUES, {
      'image.repository': 'registry.example/nsfwdetector',
      'image.tag': '0.2.0',
      'image.digest': DIGEST,
      'gateway.envoyImage.repository': 'registry.example/envoy',
      'gateway.envoyImage.tag': `v1.40.0@${DIGEST}`,
      'redis.image.repository': 'registry.example/redis',
      'redis.image.tag': `7-bookworm@${DIGEST}`,
    });
    const changed = out.split('\n').filter((l, i) => l !== VALUES.split('\n')[i]);
    // In the file's order: the service image, Envoy's, Redis's.
    expect(changed.map((l) => l.trim())).toEqual([
      'repository: "registry.example/nsfwdetector"',
      'tag: "0.2.0"',
      `digest: "${DIGEST}"`,
      'repository: "registry.example/envoy"',
      `tag: "v1.40.0@${DIGEST}"`,
      'repository: "registry.example/redis"',
      `tag: "7-bookworm@${DIGEST}"`,
    ]);
    expect(out.split('\n')).toHaveLength(VALUES.split('\n').length);
  });

  it('refuses a key the values do not have, or a mapping', () => {
    expect(() => setValues(VALUES, { 'image.sha': DIGEST })).toThrow("not in the chart's values: image.sha");
    expect(() => setValues(VALUES, { image: 'x' })).toThrow(
      "image is a mapping in the chart's values, not a value",
    );
  });
});
