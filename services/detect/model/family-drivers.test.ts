import { describe, expect, it } from 'vitest';
import { MODEL_NAMES, MODELS } from '../../../lib/common/model-catalogue.ts';
import { driverOf } from './family-drivers.ts';

describe('the family drivers', () => {
  // A 7 × 5 gradient: any frame will do, the drivers resize it to their own input.
  const width = 7;
  const height = 5;
  const rgb = Uint8Array.from({ length: width * height * 3 }, (_, i) => (i * 37) % 256);

  it.each(MODEL_NAMES)(
    "make %s's input at its row's size, from a frame no larger than they resize to",
    async (m) => {
      const { inputSize } = MODELS[m];
      const input = await driverOf(m).input(rgb, width, height, m);
      expect(input).toBeInstanceOf(Float32Array);
      expect(input.length).toBe(inputSize * inputSize * 3);
      expect(driverOf(m).resizeTarget(m)).toBeGreaterThanOrEqual(inputSize);
    },
  );
});
