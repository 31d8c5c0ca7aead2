// A PDQ hash as lists hold it: 64 hex digits (threatexchange's format, word 15 first) ↔ 32 bytes, and the
// Hamming distance between two of them. A leaf: no service, no I/O.

export const PDQ_BYTES = 32;
/** Words of 32 bits in a hash (the index and the scan work on these). */
export const PDQ_WORDS = 8;
/** Meta's match threshold (threatexchange PDQ_CONFIDENT_MATCH_THRESHOLD): distance ≤ 31 is a match. */
export const DEFAULT_MAX_DISTANCE = 31;
/** Meta's quality floor (threatexchange QUALITY_THRESHOLD): hashes of lower quality are not matched. */
export const DEFAULT_MIN_QUALITY = 50;

const HEX64 = /^[0-9a-f]{64}$/;

/** Whether `text` is a PDQ hash in threatexchange's format (64 hex digits; upper case is accepted). */
export function isPdqHex(text: string): boolean {
  return HEX64.test(text.toLowerCase());
}

/** Each character code's hex value, or -1 (upper case accepted). */
const NIBBLE = (() => {
  const t = new Int8Array(128).fill(-1);
  for (let v = 0; v < 16; v++) {
    t[v.toString(16).charCodeAt(0)] = v;
    t[v.toString(16).toUpperCase().charCodeAt(0)] = v;
  }
  return t;
})();

/** The hash's 32 bytes, in the order of its hex digits. Throws on anything but 64 hex digits. */
export function pdqBytes(hex: string, into = new Uint8Array(PDQ_BYTES), at = 0): Uint8Array {
  if (hex.length !== 64) throw new Error('not a PDQ hash (64 hex digits)');
  for (let i = 0; i < PDQ_BYTES; i++) {
    const hi = NIBBLE[hex.charCodeAt(i * 2)] ?? -1;
    const lo = NIBBLE[hex.charCodeAt(i * 2 + 1)] ?? -1;
    if (hi < 0 || lo < 0) throw new Error('not a PDQ hash (64 hex digits)');
    into[at + i] = (hi << 4) | lo;
  }
  return into;
}

/** The 64 lowercase hex digits of the hash at byte `at` of `bytes`. */
export function pdqHex(bytes: Uint8Array, at = 0): string {
  let hex = '';
  for (let i = 0; i < PDQ_BYTES; i++) hex += (bytes[at + i] as number).toString(16).padStart(2, '0');
  return hex;
}

/** The hash as eight 32-bit words (big-endian by digit), what the index compares. */
export function pdqWords(hex: string): Uint32Array {
  const bytes = pdqBytes(hex);
  return wordsOf(bytes, 0);
}

export function wordsOf(
  bytes: Uint8Array,
  at: number,
  into = new Uint32Array(PDQ_WORDS),
  to = 0,
): Uint32Array {
  for (let w = 0; w < PDQ_WORDS; w++) {
    const b = at + w * 4;
    into[to + w] =
      (((bytes[b] as number) << 24) |
        ((bytes[b + 1] as number) << 16) |
        ((bytes[b + 2] as number) << 8) |
        (bytes[b + 3] as number)) >>>
      0;
  }
  return into;
}

export function popcount32(x: number): number {
  let v = x - ((x >>> 1) & 0x55555555);
  v = (v & 0x33333333) + ((v >>> 2) & 0x33333333);
  return Math.imul((v + (v >>> 4)) & 0x0f0f0f0f, 0x01010101) >>> 24;
}

/** Hamming distance between two hashes in threatexchange's hex format. */
export function pdqDistance(a: string, b: string): number {
  const x = pdqWords(a);
  const y = pdqWords(b);
  let d = 0;
  for (let w = 0; w < PDQ_WORDS; w++) d += popcount32(((x[w] as number) ^ (y[w] as number)) >>> 0);
  return d;
}
