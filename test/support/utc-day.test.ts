import { expect, it } from 'vitest';
import { utcDayWait } from './utc-day.ts';

const at = (h: number, m: number, s: number) => Date.UTC(2026, 10, 27, h, m, s);

it('a phase within the UTC day starts at once; one spanning midnight waits until just after it', () => {
  expect(utcDayWait(60_000, at(12, 0, 0))).toBe(0);
  expect(utcDayWait(60_000, at(23, 58, 0))).toBe(0);
  expect(utcDayWait(60_000, at(23, 59, 0))).toBe(62_000);
  expect(utcDayWait(300_000, at(23, 56, 0))).toBe(242_000);
  expect(utcDayWait(60_000, Date.UTC(2026, 10, 28, 0, 0, 0))).toBe(0);
});
