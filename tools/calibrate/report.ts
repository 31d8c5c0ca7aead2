// Writes the report folder of a calibration: index.html (tables, suggestion, charts as <img>), the
// charts as SVG files, scores.csv is written by the run itself, and the suggested thresholds in the
// three shapes a deployment takes them: a DetectionPolicy manifest, Helm values, environment variables.

import { mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import sharp from 'sharp';
import { modelChoiceProblem, OFFERED_MODEL_NAMES } from '../../lib/common/model-catalogue.ts';
import type { AdviceLimits, OperatingPoint, Problem, Rate } from './advice.ts';
import { histogram, rocAuc, type Suggestion, type ThresholdRow, thresholdRow } from './metrics.ts';
import { histogramChart, lineChart } from './svg.ts';

export interface Failure {
  file: string;
  label: 'nsfw' | 'sfw';
  code: number;
  message: string;
}

export interface ReportInput {
  outDir: string;
  model: string;
  /**
   * Whether the chart values and environment name the model too (a comparison's per-model reports:
   * the model is the choice being made). The DetectionPolicy always names it: a policy that left it
   * out would apply these thresholds to whatever model the deployment runs.
   */
  nameModel?: boolean;
  nsfwDir: string;
  sfwDir: string;
  nsfw: readonly number[];
  sfw: readonly number[];
  failures: readonly Failure[];
  table: readonly ThresholdRow[];
  suggestion: Suggestion;
  targetFalseBlock: number;
  targetMiss: number;
  /** Whether the suggestion is advice to deploy (advice.ts); without `force` a failing one gets no deployable file. */
  advice: { problems: readonly Problem[]; point: OperatingPoint; limits: AdviceLimits; force: boolean };
  /** The labelled images' files, in the order of `nsfw` and `sfw`: thumbnails of the worst mistakes. */
  files?: { nsfw: readonly string[]; sfw: readonly string[] };
}

/** The deployable files of a report (what --force is needed for when the advice is flagged). */
export const DEPLOYABLE_FILES = ['values.yaml', 'thresholds.env', 'detection-policy.yaml'] as const;

/** How many of the worst misses and of the worst false blocks the report shows. */
const WORST = 6;

interface Mistake {
  file: string;
  score: number;
  thumb?: string;
}

/**
 * The worst misses (NSFW scored lowest, below allow) and false blocks (SFW scored highest, at or above
 * block), each with a small JPEG thumbnail written into the report folder (`thumbs/`): the report stays
 * on this machine, and its pictures are the user's own images, never uploaded anywhere.
 */
async function worstMistakes(r: ReportInput): Promise<{ misses: Mistake[]; falseBlocks: Mistake[] }> {
  if (!r.files) return { misses: [], falseBlocks: [] };
  const pick = (
    scores: readonly number[],
    files: readonly string[],
    keep: (x: number) => boolean,
    worstFirst: (a: number, b: number) => number,
  ) =>
    scores
      .map((score, i) => ({ score, file: files[i] as string }))
      .filter((m) => keep(m.score))
      .sort((a, b) => worstFirst(a.score, b.score))
      .slice(0, WORST);
  const misses = pick(
    r.nsfw,
    r.files.nsfw,
    (x) => x < r.suggestion.allow,
    (a, b) => a - b,
  );
  const falseBlocks = pick(
    r.sfw,
    r.files.sfw,
    (x) => x >= r.suggestion.block,
    (a, b) => b - a,
  );
  const dir = path.join(r.outDir, 'thumbs');
  const thumbs = async (list: Mistake[], kind: string) => {
    if (list.length) await mkdir(dir, { recursive: true });
    for (const [i, m] of list.entries()) {
      const name = `${kind}-${i + 1}.jpg`;
      try {
        await sharp(m.file, { animated: false, limitInputPixels: 100_000_000 })
          .rotate()
          .resize(160, 160, { fit: 'inside' })
          .jpeg({ quality: 70 })
          .toFile(path.join(dir, name));
        m.thumb = `thumbs/${name}`;
      } catch {
        // A file sharp cannot read as an image still gets its row, without a picture.
      }
    }
    return list;
  };
  return { misses: await thumbs(misses, 'miss'), falseBlocks: await thumbs(falseBlocks, 'false-block') };
}

function mistakesHtml(title: string, list: readonly Mistake[], base: string, none: string): string {
  if (!list.length) return `<h3>${title}</h3><p>${none}</p>`;
  return `<h3>${title}</h3><div class="thumbs">${list
    .map(
      (m) =>
        `<figure>${m.thumb ? `<img src="${esc(m.thumb)}" alt="" loading="lazy">` : '<div class="nothumb">no preview</div>'}<figcaption>${m.score.toFixed(4)}<br><code>${esc(path.relative(base, m.file))}</code></figcaption></figure>`,
    )
    .join('')}</div>`;
}

const interval = (r: Rate) =>
  Number.isNaN(r.rate)
    ? 'n/a'
    : `${pct(r.rate)} (${r.count} of ${r.of}; 95 % interval ${pct(r.low)} – ${pct(r.high)})`;

/** spec.model for a model choice (spelled as MODEL spells it), or undefined when a policy cannot name it. */
export function policyModelName(model: string): string | undefined {
  return modelChoiceProblem(model, OFFERED_MODEL_NAMES) ? undefined : model;
}

/** The operator's resource (DetectionPolicy): group nsfwdetector.io, version v1alpha1, spec.thresholds. */
// Named as the chart's default `operator.policyName`, so applying it replaces the policy in force.
// `policyModel`: spec.model as the DetectionPolicy spells it, when the policy should name the model.
export function detectionPolicyManifest(s: Suggestion, name = 'main', policyModel?: string): string {
  return `apiVersion: nsfwdetector.io/v1alpha1
kind: DetectionPolicy
metadata:
  name: ${name}
spec:
  thresholds:
    allow: ${s.allow}
    block: ${s.block}
${policyModel ? `  model: ${policyModel}\n` : ''}`;
}

/** The chart's keys (charts/nsfwdetector/values.yaml, config.*): pass with `helm upgrade -f`. */
export function helmValues(s: Suggestion, model?: string): string {
  return `config:
${model ? `  model: ${JSON.stringify(model)}\n` : ''}  thresholdAllow: ${s.allow}
  thresholdBlock: ${s.block}
`;
}

export function envFile(s: Suggestion, model?: string): string {
  return `${model ? `MODEL=${model}\n` : ''}THRESHOLD_ALLOW=${s.allow}\nTHRESHOLD_BLOCK=${s.block}\n`;
}

export const esc = (s: string) =>
  s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');
export const pct = (r: number) => `${(r * 100).toFixed(2)} %`;

export async function writeReport(r: ReportInput): Promise<string> {
  const s = r.suggestion;
  const rocPoints = r.table.map((row) => [row.falseBlockRate, row.recall] as const);
  // The operating point on the ROC curve: each threshold read as `block` (false blocks, NSFW blocked).
  const at = (t: number) => {
    const row = thresholdRow(t, r.nsfw, r.sfw);
    return [row.falseBlockRate, row.recall] as const;
  };
  const prPoints = r.table.map((row) => [row.recall, row.precision] as const);
  const charts: Record<string, string> = {
    'roc.svg': lineChart(
      'ROC',
      'false-block rate (SFW blocked)',
      'NSFW blocked',
      [
        { label: 'model', color: '#1f6feb', points: rocPoints },
        {
          label: 'chance',
          color: '#999',
          points: [
            [0, 0],
            [1, 1],
          ],
        },
      ],
      [
        { label: `block ${s.block}`, color: '#d1242f', at: at(s.block) },
        { label: `allow ${s.allow}`, color: '#2da44e', at: at(s.allow) },
      ],
    ),
    'precision-recall.svg': lineChart('Precision / recall', 'recall', 'precision', [
      { label: 'model', color: '#d1242f', points: prPoints },
    ]),
    'histogram.svg': histogramChart(
      'Score histograms',
      [
        { label: `NSFW (${r.nsfw.length})`, color: '#d1242f', counts: histogram(r.nsfw, 20) },
        { label: `SFW (${r.sfw.length})`, color: '#1f6feb', counts: histogram(r.sfw, 20) },
      ],
      [
        { label: `allow ${s.allow}`, color: '#2da44e', at: s.allow },
        { label: `block ${s.block}`, color: '#000', at: s.block },
      ],
    ),
  };
  const policyModel = policyModelName(r.model);
  const { problems, point, limits, force } = r.advice;
  // Flagged advice gets no file a deployment could take as it is, unless asked for (--force).
  const deployable = problems.length === 0 || force;
  const files: Record<string, string> = {
    ...charts,
    ...(deployable && policyModel
      ? { 'detection-policy.yaml': detectionPolicyManifest(s, 'main', policyModel) }
      : {}),
    ...(deployable
      ? {
          'values.yaml': helmValues(s, r.nameModel ? r.model : undefined),
          'thresholds.env': envFile(s, r.nameModel ? r.model : undefined),
        }
      : {}),
    'thresholds.json': `${JSON.stringify({ suggestion: s, flagged: problems, operatingPoint: point, limits, targetFalseBlock: r.targetFalseBlock, targetMiss: r.targetMiss, table: r.table }, null, 2)}\n`,
  };
  const mistakes = await worstMistakes(r);
  const base = path.dirname(r.nsfwDir);
  const flagged = problems.length
    ? `<div class="flagged" id="flagged"><p><b>Not advice to deploy:</b></p><ul>${problems
        .map((p) => `<li data-kind="${p.kind}">${esc(p.message)}</li>`)
        .join('')}</ul><p>${
        force
          ? 'Written anyway (--force): check the figures below before deploying them.'
          : 'No values.yaml, thresholds.env or detection-policy.yaml was written. Label more images, or loosen the targets; --force writes them anyway.'
      }</p></div>`
    : '';
  const shown = r.table.filter(
    (row) =>
      Math.round(row.threshold * 100) % 5 === 0 || row.threshold === s.allow || row.threshold === s.block,
  );
  const rows = shown
    .map((row) => {
      const mark =
        row.threshold === s.block
          ? ' class="suggested"'
          : row.threshold === s.allow
            ? ' class="suggested"'
            : '';
      return `<tr${mark}><td>${row.threshold.toFixed(2)}</td><td>${row.sfwBlocked}</td><td>${pct(row.falseBlockRate)}</td><td>${row.nsfwMissed}</td><td>${pct(row.missRate)}</td><td>${row.precision.toFixed(3)}</td><td>${row.recall.toFixed(3)}</td></tr>`;
    })
    .join('\n');
  const failures = r.failures.length
    ? `<table><thead><tr><th>File</th><th>Class</th><th>Code</th><th>Message</th></tr></thead><tbody>${r.failures
        .map(
          (f) =>
            `<tr><td>${esc(f.file)}</td><td>${f.label}</td><td>${f.code}</td><td>${esc(f.message)}</td></tr>`,
        )
        .join('\n')}</tbody></table>`
    : '<p>Every image was scored.</p>';
  const auc = rocAuc(r.nsfw, r.sfw);
  files['index.html'] = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>nsfwdetector calibration</title>
<meta name="color-scheme" content="light dark">
<style>
body{font-family:system-ui,sans-serif;max-width:1040px;margin:2rem auto;padding:0 1rem;color:CanvasText;background:Canvas}
table{border-collapse:collapse;margin:1rem 0}td,th{border:1px solid #8888;padding:.25rem .6rem;text-align:right}
tr.suggested{font-weight:bold;background:#f5c54233}figure{display:inline-block;margin:.5rem}
pre{background:#8881;padding:.6rem;overflow:auto}
.flagged{border:2px solid #d1242f;padding:.2rem 1rem;border-radius:6px;background:#d1242f14}
.thumbs figure{width:170px;vertical-align:top;font-size:.8rem;word-break:break-all}.thumbs img{max-width:160px;max-height:160px;display:block}
.nothumb{width:160px;height:60px;border:1px dashed #8888;display:flex;align-items:center;justify-content:center}
</style></head><body>
<h1>Calibration report</h1>
<p>Model <code>${esc(r.model)}</code>. NSFW folder <code>${esc(r.nsfwDir)}</code>: <b id="n-nsfw">${r.nsfw.length}</b> scored;
SFW folder <code>${esc(r.sfwDir)}</code>: <b id="n-sfw">${r.sfw.length}</b> scored; <b>${r.failures.length}</b> not decodable. ROC AUC ${Number.isNaN(auc) ? 'n/a' : auc.toFixed(4)}.</p>
<h2>Suggested thresholds</h2>
<p>For a false-block rate of at most ${pct(r.targetFalseBlock)} and a miss rate of at most ${pct(r.targetMiss)}:
<b>allow = <span id="allow">${s.allow}</span></b>, <b>block = <span id="block">${s.block}</span></b>
(an image is allowed below allow, blocked at or above block, reviewed in between).</p>
${flagged}
<table id="operating-point"><tbody>
<tr><th>False blocks (SFW at or above block)</th><td>${interval(point.falseBlock)}</td></tr>
<tr><th>Misses (NSFW below allow)</th><td>${interval(point.miss)}</td></tr>
<tr><th>Allowed (all images)</th><td>${interval(point.allowed)}</td></tr>
<tr><th>Sent to review (all images)</th><td>${interval(point.review)}</td></tr>
<tr><th>Blocked (all images)</th><td>${interval(point.blocked)}</td></tr>
</tbody></table>
<p>Suggested only with at least ${limits.minPerLabel} scored images of each label, and flagged when the point allows nothing, blocks everything or sends more than ${pct(limits.maxReview)} to review.</p>
${
  !deployable
    ? ''
    : files['detection-policy.yaml'] === undefined
      ? `<p>No detection-policy.yaml: the DetectionPolicy's <code>spec.model</code> cannot name <code>${esc(r.model)}</code>.</p>`
      : `<h3>DetectionPolicy (detection-policy.yaml)</h3><pre>${esc(files['detection-policy.yaml'])}</pre>`
}
${
  deployable
    ? `<h3>Helm values (values.yaml)</h3><pre>${esc(files['values.yaml'] ?? '')}</pre>
<h3>Environment (thresholds.env)</h3><pre>${esc(files['thresholds.env'] ?? '')}</pre>`
    : ''
}
<h2>Charts</h2>
<figure><img src="roc.svg" alt="ROC curve" width="480" height="360"></figure>
<figure><img src="precision-recall.svg" alt="Precision/recall curve" width="480" height="360"></figure>
<figure><img src="histogram.svg" alt="Score histograms of both classes" width="480" height="360"></figure>
<h2>The worst mistakes at these thresholds</h2>
<p>Thumbnails made from your own files, kept in this report folder (<code>thumbs/</code>); nothing is uploaded.</p>
${mistakesHtml('Misses: NSFW images scored lowest, below allow', mistakes.misses, base, 'No NSFW image scored below allow.')}
${mistakesHtml('False blocks: SFW images scored highest, at or above block', mistakes.falseBlocks, base, 'No SFW image scored at or above block.')}
<h2>Candidate thresholds</h2>
<p>False block: SFW images scoring at or above the threshold (it as <code>block</code>). Miss: NSFW images scoring below it (it as <code>allow</code>). Every hundredth is in thresholds.json.</p>
<table id="thresholds"><thead><tr><th>Threshold</th><th>SFW blocked</th><th>False-block rate</th><th>NSFW missed</th><th>Miss rate</th><th>Precision</th><th>Recall</th></tr></thead>
<tbody>${rows}</tbody></table>
<h2>Not decodable</h2>
${failures}
</body></html>
`;
  for (const [name, text] of Object.entries(files)) await writeFile(path.join(r.outDir, name), text);
  return path.join(r.outDir, 'index.html');
}
