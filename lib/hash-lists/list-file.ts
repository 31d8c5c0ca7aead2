// A hash list's file, as operators bring it in: one PDQ hash (64 hex digits) a line, `#` comments and
// blank lines ignored; or a CSV export (HMA's and ThreatExchange's: a header naming the hash column
// `signal`, `signal_value`, `hash` or `pdq`, and `signal_type` where the export mixes types — rows of
// another type than pdq are skipped). All or nothing: the first malformed line fails the whole file,
// named by its number, and nothing of the file is returned. Lines are never echoed (they may be
// confidential): an error says where and why, not what.

import { PDQ_BYTES, pdqBytes } from './pdq-hex.ts';

export class ListFileError extends Error {
  readonly line: number;
  constructor(line: number, reason: string) {
    super(`line ${line}: ${reason}`);
    this.line = line;
  }
}

const HASH_COLUMNS = ['signal', 'signal_value', 'hash', 'pdq', 'pdq_hash'];
const TYPE_COLUMNS = ['signal_type', 'type'];

/** The file's hashes, 32 bytes each, in file order. Throws ListFileError. */
export function parseHashList(text: string): Uint8Array {
  const lines = text.split(/\r?\n/);
  const out = new Uint8Array(lines.length * PDQ_BYTES);
  let n = 0;
  let csv: { hash: number; type: number } | undefined;
  lines.forEach((raw, i) => {
    const number = i + 1;
    const line = raw.trim();
    if (line === '' || line.startsWith('#')) return;
    let hex = line;
    if (line.includes(',')) {
      const fields = line.split(',').map((f) => f.trim().replace(/^"(.*)"$/, '$1'));
      if (!csv) {
        const names = fields.map((f) => f.toLowerCase());
        const hash = names.findIndex((f) => HASH_COLUMNS.includes(f));
        if (hash < 0)
          throw new ListFileError(
            number,
            `a CSV header must name the hash column (${HASH_COLUMNS.join(', ')})`,
          );
        csv = { hash, type: names.findIndex((f) => TYPE_COLUMNS.includes(f)) };
        return;
      }
      if (csv.type >= 0 && fields[csv.type]?.toLowerCase() !== 'pdq') return;
      hex = fields[csv.hash] ?? '';
    } else if (csv) {
      throw new ListFileError(number, "a CSV row must have the header's columns");
    }
    try {
      pdqBytes(hex, out, n * PDQ_BYTES);
    } catch {
      throw new ListFileError(number, 'not a PDQ hash (64 hex digits)');
    }
    n++;
  });
  return out.slice(0, n * PDQ_BYTES);
}
