// Writes the comparison of a multi-model calibration at the top of the report folder: index.html (the
// models side by side, the recommendation, links to each model's own report in its subfolder),
// comparison.json, and the recommended model and thresholds as a DetectionPolicy, Helm values and
// environment variables.

import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { OFFERED_MODEL_NAMES } from '../../lib/common/model-catalogue.ts';
import type { Problem } from './advice.ts';
import type { ModelComparison, Recommendation, Targets } from './compare.ts';
import { thresholdRow, thresholdTable } from './metrics.ts';
import { detectionPolicyManifest, envFile, esc, helmValues, pct, policyModelName } from './report.ts';
import { lineChart, type Marker, type Series } from './svg.ts';

export interface ComparisonInput {
  outDir: string;
  nsfwDir: string;
  sfwDir: string;
  targets: Targets;
  rows: readonly ModelComparison[];
  recommendation: Recommendation;
  /** Each model's scores, for the ROC chart of every model with its operating point. */
  curves?: ReadonlyArray<{ model: string; nsfw: readonly number[]; sfw: readonly number[] }>;
  /** Whether the recommendation is advice to deploy (advice.ts); without `force` a flagged one gets no deployable file. */
  advice?: { problems: readonly Problem[]; force: boolean };
}

const PALETTE = ['#1f6feb', '#d1242f', '#2da44e', '#8250df', '#bf8700', '#0a7b83'];

/** Every model's ROC curve, each with its block and allow thresholds marked on it. */
export function comparisonRoc(c: ComparisonInput): string {
  const curves = c.curves ?? [];
  const series: Series[] = curves.map((run, i) => ({
    label: run.model,
    color: PALETTE[i % PALETTE.length] as string,
    points: thresholdTable(run.nsfw, run.sfw).map((row) => [row.falseBlockRate, row.recall] as const),
  }));
  const points: Marker[] = curves.flatMap((run, i) => {
    const row = c.rows.find((r) => r.model === run.model);
    if (!row) return [];
    const at = (t: number) => {
      const r = thresholdRow(t, run.nsfw, run.sfw);
      return [r.falseBlockRate, r.recall] as const;
    };
    const color = PALETTE[i % PALETTE.length] as string;
    return [
      { label: `block ${row.suggestion.block}`, color, at: at(row.suggestion.block) },
      { label: `allow ${row.suggestion.allow}`, color, at: at(row.suggestion.allow) },
    ];
  });
  return lineChart(
    'ROC of every model, with its operating points',
    'false-block rate (SFW blocked)',
    'NSFW blocked',
    series,
    points,
  );
}

/** The files of the comparison, by name (no DetectionPolicy when its CRD cannot name the model). */
export function comparisonFiles(c: ComparisonInput): Record<string, string> {
  const best = c.recommendation.choice;
  const problems = c.advice?.problems ?? [];
  const deployable = problems.length === 0 || (c.advice?.force ?? false);
  const policyModel = deployable ? policyModelName(best.model) : undefined;
  const files: Record<string, string> = {
    ...(c.curves?.length ? { 'roc.svg': comparisonRoc(c) } : {}),
    ...(deployable
      ? {
          'values.yaml': helmValues(best.suggestion, best.model),
          'thresholds.env': envFile(best.suggestion, best.model),
        }
      : {}),
    'comparison.json': `${JSON.stringify(
      {
        targets: c.targets,
        recommendation: {
          model: best.model,
          thresholds: best.suggestion,
          meetsTargets: c.recommendation.meetsTargets,
          reason: c.recommendation.reason,
          ...(c.advice ? { flagged: problems } : {}),
        },
        aucInterval: 'DeLong, 95 %',
        models: c.rows,
      },
      null,
      2,
    )}\n`,
  };
  // A policy without the model would apply these thresholds to whatever model the deployment runs, so
  // none is written for a model a policy cannot name.
  if (policyModel)
    files['detection-policy.yaml'] = detectionPolicyManifest(best.suggestion, 'main', policyModel);
  const rows = c.rows
    .map((r) => {
      const mark = r === best ? ' class="recommended"' : '';
      const ci = Number.isNaN(r.auc.auc)
        ? 'n/a'
        : `${r.auc.auc.toFixed(4)} [${r.auc.low.toFixed(4)}, ${r.auc.high.toFixed(4)}]`;
      const meets = r.missed.length ? `no (${r.missed.join(', ')})` : 'yes';
      return `<tr${mark}><td><a href="${esc(encodeURIComponent(r.model))}/index.html">${esc(r.model)}</a></td><td>${r.nsfwScored} + ${r.sfwScored}</td><td>${ci}</td><td>${r.suggestion.allow}</td><td>${r.suggestion.block}</td><td>${pct(r.falseBlockRate)}</td><td>${pct(r.missRate)}</td><td>${pct(r.reviewRate)}</td><td>${r.cpuMsPerImage.toFixed(1)}</td><td>${meets}</td></tr>`;
    })
    .join('\n');
  const flagged = problems.length
    ? `<div class="flagged" id="flagged"><p><b>Not advice to deploy:</b></p><ul>${problems.map((p) => `<li data-kind="${p.kind}">${esc(p.message)}</li>`).join('')}</ul><p>${deployable ? 'Written anyway (--force).' : 'No values.yaml, thresholds.env or detection-policy.yaml was written; --force writes them anyway.'}</p></div>`
    : '';
  const deploy = !deployable
    ? ''
    : policyModel
      ? `<h3>DetectionPolicy (detection-policy.yaml)</h3><pre>${esc(files['detection-policy.yaml'] ?? '')}</pre>`
      : `<p>No detection-policy.yaml: the DetectionPolicy's <code>spec.model</code> accepts only ${OFFERED_MODEL_NAMES.join(', ')} and ensembles of them, so it cannot name <code>${esc(best.model)}</code>; with the operator on, detect runs the policy's model instead of <code>config.model</code>, so this choice deploys with the chart's values and the operator off.</p>`;
  files['index.html'] = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>nsfwdetector model comparison</title>
<meta name="color-scheme" content="light dark">
<style>
body{font-family:system-ui,sans-serif;max-width:1100px;margin:2rem auto;padding:0 1rem;color:CanvasText;background:Canvas}
table{border-collapse:collapse;margin:1rem 0}td,th{border:1px solid #8888;padding:.25rem .6rem;text-align:right}
tr.recommended{font-weight:bold;background:#f5c54233}pre{background:#8881;padding:.6rem;overflow:auto}
.flagged{border:2px solid #d1242f;padding:.2rem 1rem;border-radius:6px;background:#d1242f14}
</style></head><body>
<h1>Model comparison</h1>
<p>NSFW folder <code>${esc(c.nsfwDir)}</code>, SFW folder <code>${esc(c.sfwDir)}</code>, each image scored once per model.
Targets: false-block rate at most ${pct(c.targets.falseBlock)}, miss rate at most ${pct(c.targets.miss)}, review rate at most ${pct(c.targets.review)}.</p>
<h2>Recommendation</h2>
<p><b>MODEL=<span id="model">${esc(best.model)}</span></b>, <b>allow = <span id="allow">${best.suggestion.allow}</span></b>, <b>block = <span id="block">${best.suggestion.block}</span></b>: <span id="reason">${esc(c.recommendation.reason)}</span>.</p>
${flagged}
${deployable ? `<h3>Helm values (values.yaml)</h3><pre>${esc(files['values.yaml'] ?? '')}</pre>\n<h3>Environment (thresholds.env)</h3><pre>${esc(files['thresholds.env'] ?? '')}</pre>` : ''}
${deploy}
${files['roc.svg'] ? '<h2>ROC curves</h2>\n<figure><img src="roc.svg" alt="ROC curve of every model with its operating points" width="480" height="360"></figure>' : ''}
<h2>Side by side</h2>
<p>ROC AUC with its 95 % confidence interval by DeLong's method (exact, no resampling; too narrow on few images).
False block: SFW images at or above the model's block threshold; miss: NSFW images below its allow threshold;
review: all images between. CPU: process CPU time per scored image, decode included, one image at a time.</p>
<table id="models"><thead><tr><th>Model</th><th>Scored (NSFW + SFW)</th><th>ROC AUC [95 % CI]</th><th>allow</th><th>block</th><th>False block</th><th>Miss</th><th>Review</th><th>CPU ms / image</th><th>Meets targets</th></tr></thead>
<tbody>${rows}</tbody></table>
</body></html>
`;
  return files;
}

export async function writeComparison(c: ComparisonInput): Promise<string> {
  for (const [name, text] of Object.entries(comparisonFiles(c)))
    await writeFile(path.join(c.outDir, name), text);
  return path.join(c.outDir, 'index.html');
}
