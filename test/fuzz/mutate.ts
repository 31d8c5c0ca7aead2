// A plain mutation step for the in-process parser fuzzer (parsers-fuzz-child.ts), in the spirit of
// libFuzzer's default mutators: bit and byte changes, integers set to boundary values (lengths, sizes,
// offsets and counts are what header parsers trust), ranges deleted, inserted, duplicated, and chunks
// spliced in from other seeds. Deterministic for a given `random`.

const INTERESTING_8 = [0, 1, 0x7f, 0x80, 0xfe, 0xff];
const INTERESTING_32 = [
  0, 1, 2, 0x7f, 0x80, 0xff, 0x100, 0x7fff, 0x8000, 0xffff, 0x10000, 0x7fffffff, 0x80000000, 0xffffffff,
];

export function mutate(
  input: Uint8Array,
  random: () => number,
  pool: readonly Uint8Array[],
  maxLength: number,
): Uint8Array {
  let out: Uint8Array = Uint8Array.from(input);
  const below = (n: number) => Math.floor(random() * n);
  const steps = 1 + below(4);
  for (let s = 0; s < steps; s++) {
    const at = below(Math.max(1, out.length));
    switch (below(10)) {
      case 0:
        if (out.length) out[at] = (out[at] ?? 0) ^ (1 << below(8));
        break;
      case 1:
        if (out.length) out[at] = below(256);
        break;
      case 2:
        if (out.length) out[at] = INTERESTING_8[below(INTERESTING_8.length)] ?? 0;
        break;
      case 3: {
        // An integer of 2 or 4 bytes, either byte order, set to a boundary value or the input's length.
        const width = below(2) ? 2 : 4;
        const values = [...INTERESTING_32, out.length, out.length + 1, out.length - 1];
        const value = (values[below(values.length)] ?? 0) >>> 0;
        const bigEndian = below(2) === 1;
        for (let i = 0; i < width && at + i < out.length; i++) {
          const shift = 8 * (bigEndian ? width - 1 - i : i);
          out[at + i] = (value >>> shift) & 0xff;
        }
        break;
      }
      case 4: {
        const length = 1 + below(Math.min(64, Math.max(1, out.length - at)));
        out = concat(out.subarray(0, at), out.subarray(at + length));
        break;
      }
      case 5: {
        const inserted = Uint8Array.from({ length: 1 + below(16) }, () => below(256));
        out = concat(out.subarray(0, at), inserted, out.subarray(at));
        break;
      }
      case 6: {
        const from = below(Math.max(1, out.length));
        const chunk = out.slice(from, from + 1 + below(256));
        out = concat(out.subarray(0, at), chunk, out.subarray(at));
        break;
      }
      case 7:
        out = out.slice(0, below(out.length + 1));
        break;
      case 8: {
        const other = pool[below(pool.length)];
        if (!other?.length) break;
        const from = below(other.length);
        const chunk = other.subarray(from, from + 1 + below(512));
        out = below(2)
          ? concat(out.subarray(0, at), chunk, out.subarray(at))
          : concat(out.subarray(0, at), chunk);
        break;
      }
      default: {
        // Copies a range over another place in the same input (repeated markers, chunks, IFD entries).
        const from = below(Math.max(1, out.length));
        const chunk = out.slice(from, from + 1 + below(64));
        out.set(chunk.subarray(0, Math.max(0, out.length - at)), at);
      }
    }
  }
  return out.length > maxLength ? out.subarray(0, maxLength) : out;
}

function concat(...parts: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}
