// The tally of a robustness run: for each model and re-encoding, how many decisions stayed what they
// were on the original file, and the largest change of scores.nsfw (with the image that made it).

import type { Thresholds } from '../../lib/policy/rules.ts';

export type Decision = 'allow' | 'review' | 'block';

/** Spec 2.2 rule 2: allow below `allow`, block at or above `block`, review between. */
export function decide(nsfw: number, t: Thresholds): Decision {
  return nsfw < t.allow ? 'allow' : nsfw >= t.block ? 'block' : 'review';
}

export interface Cell {
  /** Variants scored (a variant the service refused counts as changed: see `refused`). */
  scored: number;
  unchanged: number;
  /** Variants the service refused though their original was scored. */
  refused: number;
  maxDelta: number;
  /** The image of the largest change ('' while there is none). */
  worst: string;
}

const emptyCell = (): Cell => ({ scored: 0, unchanged: 0, refused: 0, maxDelta: 0, worst: '' });

export class RobustnessTally {
  readonly #cells = new Map<string, Map<string, Cell>>();
  readonly #thresholds: Thresholds;

  constructor(thresholds: Thresholds) {
    this.#thresholds = thresholds;
  }

  #cell(model: string, variant: string): Cell {
    const byVariant = this.#cells.get(model) ?? new Map<string, Cell>();
    this.#cells.set(model, byVariant);
    const cell = byVariant.get(variant) ?? emptyCell();
    byVariant.set(variant, cell);
    return cell;
  }

  /** One variant of one image: its original's score and its own (undefined when refused). */
  add(model: string, variant: string, image: string, original: number, score: number | undefined): void {
    const cell = this.#cell(model, variant);
    cell.scored++;
    if (score === undefined) {
      cell.refused++;
      return;
    }
    if (decide(score, this.#thresholds) === decide(original, this.#thresholds)) cell.unchanged++;
    const delta = Math.abs(score - original);
    if (delta > cell.maxDelta) {
      cell.maxDelta = delta;
      cell.worst = image;
    }
  }

  models(): string[] {
    return [...this.#cells.keys()];
  }

  variants(model: string): string[] {
    return [...(this.#cells.get(model)?.keys() ?? [])];
  }

  get(model: string, variant: string): Cell {
    return this.#cells.get(model)?.get(variant) ?? emptyCell();
  }

  /** Every variant of a model together. */
  total(model: string): Cell {
    const all = emptyCell();
    for (const v of this.variants(model)) {
      const c = this.get(model, v);
      all.scored += c.scored;
      all.unchanged += c.unchanged;
      all.refused += c.refused;
      if (c.maxDelta > all.maxDelta) {
        all.maxDelta = c.maxDelta;
        all.worst = `${c.worst} (${v})`;
      }
    }
    return all;
  }
}

const share = (c: Cell) =>
  c.scored ? `${((c.unchanged / c.scored) * 100).toFixed(1)} % (${c.unchanged}/${c.scored})` : 'n/a';

/** Four decimals; an exact 0 as 0, so no change reads apart from a tiny one. */
const fmtDelta = (d: number) => (d === 0 ? '0' : d.toFixed(4));

/** The table as Markdown: a row per model and variant, then the model's total. */
export function robustnessTable(tally: RobustnessTally): string {
  const lines = [
    '| model | re-encoding | decisions unchanged | refused | largest Δ scores.nsfw | on |',
    '| --- | --- | --- | --- | --- | --- |',
  ];
  for (const model of tally.models()) {
    for (const v of tally.variants(model)) {
      const c = tally.get(model, v);
      lines.push(`| ${model} | ${v} | ${share(c)} | ${c.refused} | ${fmtDelta(c.maxDelta)} | ${c.worst} |`);
    }
    const t = tally.total(model);
    lines.push(
      `| **${model}** | **all** | **${share(t)}** | ${t.refused} | **${fmtDelta(t.maxDelta)}** | ${t.worst} |`,
    );
  }
  return `${lines.join('\n')}\n`;
}
