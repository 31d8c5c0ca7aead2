// Writes the report folder of a calibration: index.html (tables, suggestion, charts as <img>), the
// charts as SVG files, scores.csv is written by the run itself, and the suggested thresholds in the
// three shapes a deployment takes them: a DetectionPolicy manifest, Helm values, environment variables.

import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { modelChoiceProblem, OFFERED_MODEL_NAMES } from '../../lib/policy/model-catalogue.ts';
import { histogram, rocAuc, type Suggestion, type ThresholdRow } from './metrics.ts';
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
}

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
  const rocPoints = r.table.map((row) => [row.falseBlockRate, row.recall] as const);
  const prPoints = r.table.map((row) => [row.recall, row.precision] as const);
  const charts: Record<string, string> = {
    'roc.svg': lineChart('ROC', 'false-block rate (SFW blocked)', 'NSFW blocked', [
      { label: 'model', color: '#1f6feb', points: rocPoints },
      {
        label: 'chance',
        color: '#999',
        points: [
          [0, 0],
          [1, 1],
        ],
      },
    ]),
    'precision-recall.svg': lineChart('Precision / recall', 'recall', 'precision', [
      { label: 'model', color: '#d1242f', points: prPoints },
    ]),
    'histogram.svg': histogramChart('Score histograms', [
      { label: `NSFW (${r.nsfw.length})`, color: '#d1242f', counts: histogram(r.nsfw, 20) },
      { label: `SFW (${r.sfw.length})`, color: '#1f6feb', counts: histogram(r.sfw, 20) },
    ]),
  };
  const s = r.suggestion;
  const policyModel = policyModelName(r.model);
  const files: Record<string, string> = {
    ...charts,
    ...(policyModel ? { 'detection-policy.yaml': detectionPolicyManifest(s, 'main', policyModel) } : {}),
    'values.yaml': helmValues(s, r.nameModel ? r.model : undefined),
    'thresholds.env': envFile(s, r.nameModel ? r.model : undefined),
    'thresholds.json': `${JSON.stringify({ suggestion: s, targetFalseBlock: r.targetFalseBlock, targetMiss: r.targetMiss, table: r.table }, null, 2)}\n`,
  };
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
</style></head><body>
<h1>Calibration report</h1>
<p>Model <code>${esc(r.model)}</code>. NSFW folder <code>${esc(r.nsfwDir)}</code>: <b id="n-nsfw">${r.nsfw.length}</b> scored;
SFW folder <code>${esc(r.sfwDir)}</code>: <b id="n-sfw">${r.sfw.length}</b> scored; <b>${r.failures.length}</b> not decodable. ROC AUC ${Number.isNaN(auc) ? 'n/a' : auc.toFixed(4)}.</p>
<h2>Suggested thresholds</h2>
<p>For a false-block rate of at most ${pct(r.targetFalseBlock)} and a miss rate of at most ${pct(r.targetMiss)}:
<b>allow = <span id="allow">${s.allow}</span></b>, <b>block = <span id="block">${s.block}</span></b>
(an image is allowed below allow, blocked at or above block, reviewed in between).</p>
${files['detection-policy.yaml'] === undefined ? `<p>No detection-policy.yaml: the DetectionPolicy's <code>spec.model</code> cannot name <code>${esc(r.model)}</code>.</p>` : `<h3>DetectionPolicy (detection-policy.yaml)</h3><pre>${esc(files['detection-policy.yaml'])}</pre>`}
<h3>Helm values (values.yaml)</h3><pre>${esc(files['values.yaml'] ?? '')}</pre>
<h3>Environment (thresholds.env)</h3><pre>${esc(files['thresholds.env'] ?? '')}</pre>
<h2>Charts</h2>
<figure><img src="roc.svg" alt="ROC curve" width="480" height="360"></figure>
<figure><img src="precision-recall.svg" alt="Precision/recall curve" width="480" height="360"></figure>
<figure><img src="histogram.svg" alt="Score histograms of both classes" width="480" height="360"></figure>
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
