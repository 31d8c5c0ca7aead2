// The files generated from the settings table (lib/common/settings.ts), each rendered from the
// table and — for a file only partly generated — from its current text: the chart's `config:` block
// (values.yaml), that block's schema (values.schema.json), the pods' environment from it
// (templates/_workloads.tpl), the edge's limits derived from the services' (templates/_derived.tpl),
// the DetectionPolicy CRD, the configuration reference (docs/configuration.md), and the chart README,
// which is generated from values.yaml.
// tools/build/generate-settings.ts writes them or, with --check, lists the stale ones.

import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { renderReadme } from '../../charts/nsfwdetector/readme/generate.ts';
import { ERRORS } from '../../lib/common/errors.ts';
import { MAX_REQUEST_HEADER_BYTES, MAX_REQUEST_HEADERS } from '../../lib/common/http-limits.ts';
import { modelChoicePattern, OFFERED_MODEL_NAMES } from '../../lib/common/model-catalogue.ts';
import { refusedBodyBounds } from '../../lib/common/root-app.ts';
import { type Process, SETTINGS, type Section, type Setting } from '../../lib/common/settings.ts';
import { DETECTION_POLICY_CRD_HEADER, detectionPolicyCrd } from '../../lib/policy/detection-policy-crd.ts';
import { toYaml, yamlScalar } from './yaml.ts';

export const ROOT = fileURLToPath(new URL('../../', import.meta.url));

export const GENERATED = {
  values: 'charts/nsfwdetector/values.yaml',
  schema: 'charts/nsfwdetector/values.schema.json',
  workloads: 'charts/nsfwdetector/templates/_workloads.tpl',
  derived: 'charts/nsfwdetector/templates/_derived.tpl',
  crd: 'charts/nsfwdetector/crds/detectionpolicies.yaml',
  docs: 'docs/configuration.md',
  chartReadme: 'charts/nsfwdetector/README.md',
} as const;

export type GeneratedFile = keyof typeof GENERATED;

const rows = () => Object.entries(SETTINGS) as Array<[string, Setting]>;
const chartRows = () =>
  rows().filter((r): r is [string, Setting & { chart: NonNullable<Setting['chart']> }] => !!r[1].chart);

function chartDefault(s: Setting & { chart: NonNullable<Setting['chart']> }): string | number {
  const value = s.chart.default ?? s.default;
  if (value === undefined) throw new Error(`settings: ${s.chart.key} needs a chart default`);
  return value;
}

const allowed = (s: Setting): readonly string[] | undefined =>
  s.type === 'model' ? OFFERED_MODEL_NAMES : s.type === 'enum' ? s.values : undefined;

/** The numeric settings that must be less than another of their kind (`below`), with that other one. */
const belowRows = () =>
  rows().flatMap(([name, s]) => {
    if ((s.type !== 'integer' && s.type !== 'number') || !s.below) return [];
    const other = (SETTINGS as Record<string, Setting>)[s.below.setting];
    if (other?.type !== s.type)
      throw new Error(`settings: ${name} is below ${s.below.setting}, which is no ${s.type} setting`);
    return [{ name, s, below: s.below, other }];
  });

/**
 * Refuses a table whose chart default is outside its own range (the schema would refuse the chart), or
 * breaks a `below` rule (every pod would refuse it at boot).
 */
function checkTable(): void {
  for (const { name, s, below, other } of belowRows()) {
    if (!s.chart !== !other.chart)
      throw new Error(`settings: ${name} and ${below.setting} must both be chart values, or neither`);
    const value = s.chart?.default ?? s.default;
    const limit = other.chart?.default ?? other.default;
    if (value !== undefined && limit !== undefined && value >= limit)
      throw new Error(`settings: ${name}'s default ${value} is not below ${below.setting}'s ${limit}`);
  }
  for (const [name, s] of chartRows()) {
    const v = chartDefault(s);
    const values = allowed(s);
    if ((s.type === 'integer' || s.type === 'number') && typeof v === 'number') {
      const max = 'max' in s && s.max !== undefined ? s.max : Number.POSITIVE_INFINITY;
      if (v < s.min || v > max) throw new Error(`settings: ${name}'s chart default ${v} is out of range`);
    } else if (values && !values.includes(String(v)))
      throw new Error(`settings: ${name}'s default ${v} is not one of ${values.join(', ')}`);
  }
}

// --- values.yaml: the `config:` block, from the comment above it to the first blank line after it.

const CONFIG_INTRO = `# The product's limits, thresholds and timeouts, passed to every service as its environment variables
# (docs/configuration.md). Generated from lib/common/settings.ts by \`npm run settings\`: edit there.`;

function configBlock(): string {
  const lines = [CONFIG_INTRO, 'config:'];
  for (const [name, s] of chartRows()) {
    lines.push(`  # -- ${name}: ${s.doc}`);
    lines.push(`  ${s.chart.key}: ${yamlScalar(chartDefault(s))}`);
  }
  return lines.join('\n');
}

function replaceBlock(text: string, file: string, find: RegExp, block: string): string {
  const m = find.exec(text);
  if (!m) throw new Error(`${file}: the generated block was not found (${find})`);
  return text.slice(0, m.index) + block + text.slice(m.index + m[0].length);
}

export function renderValues(current: string): string {
  return replaceBlock(
    current,
    GENERATED.values,
    /(^#[^\n]*\n)*config:\n(?:[ \t]+[^\n]*\n)*/m,
    `${configBlock()}\n`,
  );
}

// --- values.schema.json: properties.config.

function valueSchema(s: Setting): Record<string, unknown> {
  switch (s.type) {
    case 'integer':
      return { type: 'integer', minimum: s.min, ...(s.max !== undefined && { maximum: s.max }) };
    case 'number':
      return { type: 'number', minimum: s.min, maximum: s.max };
    case 'model':
      return { type: 'string', pattern: modelChoicePattern() };
    case 'enum':
      return { enum: [...(allowed(s) as readonly string[])] };
    case 'string':
      return {
        type: 'string',
        ...(s.pattern && { pattern: s.pattern }),
        ...(s.minLength !== undefined && { minLength: s.minLength }),
      };
  }
}

export function configSchema(): Record<string, unknown> {
  return {
    type: 'object',
    additionalProperties: false,
    properties: Object.fromEntries(chartRows().map(([, s]) => [s.chart.key, valueSchema(s)])),
  };
}

const scalar = (v: unknown) => v === null || typeof v !== 'object';

/** JSON as Biome formats it: two spaces, objects expanded, a list of scalars on one line where it fits. */
export function formatJson(value: unknown, indent = '', prefix = 0): string {
  if (scalar(value)) return JSON.stringify(value);
  const inner = `${indent}  `;
  if (Array.isArray(value)) {
    if (value.length === 0) return '[]';
    if (value.every(scalar)) {
      const line = `[${value.map((v) => JSON.stringify(v)).join(', ')}]`;
      // The closing comma of the member counts towards the line.
      if (prefix + line.length + 1 <= 110) return line;
    }
    const items = value.map((v) => `${inner}${formatJson(v, inner, inner.length)}`);
    return `[\n${items.join(',\n')}\n${indent}]`;
  }
  const entries = Object.entries(value as Record<string, unknown>);
  if (entries.length === 0) return '{}';
  const members = entries.map(([k, v]) => {
    const head = `${inner}${JSON.stringify(k)}: `;
    return `${head}${formatJson(v, inner, head.length)}`;
  });
  return `{\n${members.join(',\n')}\n${indent}}`;
}

export function renderSchema(current: string): string {
  const schema = JSON.parse(current) as { properties: Record<string, unknown> };
  schema.properties.config = configSchema();
  return `${formatJson(schema)}\n`;
}

// --- templates/_workloads.tpl: one env entry per chart value, for the services (every value) and for
// the operator (the values the table says it reads).

interface EnvRegion {
  begin: string;
  end: string;
  /** Only the values this process reads; undefined: every value. */
  process?: Process;
}

const ENV_REGIONS: readonly EnvRegion[] = [
  {
    begin: '{{- /* Generated from lib/common/settings.ts by `npm run settings`: one per `config` value. */}}',
    end: '{{- /* End of the generated lines. */}}',
  },
  {
    begin:
      '{{- /* Generated from lib/common/settings.ts by `npm run settings`: the `config` values the operator reads. */}}',
    end: "{{- /* End of the operator's generated lines. */}}",
    process: 'operator',
  },
];

const readBy = (s: Setting, process: Process | undefined) => !process || s.readBy.includes(process);

/** A `fail` for each `below` rule between chart values, worded as the services word it at boot. */
function belowChecks(process: Process | undefined): string[] {
  return belowRows().flatMap(({ s, below, other }) => {
    if (!s.chart || !other.chart || !readBy(s, process) || !readBy(other, process)) return [];
    // Helm's numbers are float64: an integer compared and printed as one, a probability as it is.
    const [cast, verb] = s.type === 'integer' ? ['int64', '%d'] : ['float64', '%v'];
    const value = `(${cast} $c.${s.chart.key})`;
    const limit = `(${cast} $c.${other.chart.key})`;
    const message = `config.${s.chart.key} must be less than config.${other.chart.key} (${below.why}), got ${verb} and ${verb}`;
    return [
      `{{- if ge ${value} ${limit} }}`,
      `{{- fail (printf ${JSON.stringify(message)} ${value} ${limit}) }}`,
      '{{- end }}',
    ];
  });
}

function envLines(process: Process | undefined): string {
  return [...belowChecks(process), ...envEntries(process)].join('\n');
}

function envEntries(process: Process | undefined): string[] {
  return chartRows()
    .filter(([, s]) => s.chart.env !== false && readBy(s, process))
    .map(([name, s]) =>
      s.type === 'integer'
        ? `- { name: ${name}, value: {{ $c.${s.chart.key} | int64 | quote }} }`
        : `- { name: ${name}, value: {{ $c.${s.chart.key} | quote }} }`,
    );
}

export function renderWorkloads(current: string): string {
  let text = current;
  for (const region of ENV_REGIONS) {
    const begin = text.indexOf(region.begin);
    const end = text.indexOf(region.end, begin);
    if (begin < 0 || end < begin)
      throw new Error(`${GENERATED.workloads}: the generated env lines were not found (${region.begin})`);
    text = `${text.slice(0, begin + region.begin.length)}\n${envLines(region.process)}\n${text.slice(end)}`;
  }
  return text;
}

// --- templates/_derived.tpl, whole: the chart's values computed from others as the code computes them.

/** `a × x + b` for a function of x the code computes, refused unless it is that line. */
function linear(f: (x: number) => number, what: string): { a: number; b: number } {
  const b = f(0);
  const a = f(1) - b;
  for (const x of [SETTINGS.MAX_FILE_BYTES.default, 12_345_678])
    if (f(x) !== a * x + b)
      throw new Error(`settings: ${what} is no longer a × x + b; update _derived.tpl's rendering`);
  return { a, b };
}

/** The edge's body bound as a × config.maxFileBytes + b. */
const edgeBody = () =>
  linear((x) => refusedBodyBounds(x).maxBytes, 'refusedBodyBounds(maxFileBytes).maxBytes');

export function renderDerived(): string {
  const body = edgeBody();
  const tooLarge = JSON.stringify({
    code: ERRORS.FILE_TOO_LARGE.code,
    message: ERRORS.FILE_TOO_LARGE.message,
  });
  if (MAX_REQUEST_HEADER_BYTES % 1024 !== 0)
    throw new Error('settings: MAX_REQUEST_HEADER_BYTES is not whole KiB');
  return `{{/*
Generated by \`npm run settings\` from the code's limits; do not edit by hand. Values the edge derives
from the services' own, computed as the services compute them.
*/}}

{{/* The longest body the edge lets through: detect's bound on reading a refused body to its end
(refusedBodyBounds, lib/common/root-app.ts) for config.maxFileBytes. Longer declared bodies are
refused at the edge (400/4003) unread. */}}
{{- define "nsfwdetector.edgeMaxRequestBytes" -}}
{{ add (mul ${body.a} (int64 .Values.config.maxFileBytes)) ${body.b} }}
{{- end -}}

{{/* The 400/4003 body Envoy answers such a request with (lib/common/errors.ts, FILE_TOO_LARGE). */}}
{{- define "nsfwdetector.fileTooLargeBody" -}}
${tooLarge}
{{- end -}}

{{/* Request line and headers a client may send, in KiB, and how many headers
(lib/common/http-limits.ts): what passes the edge is never refused by a service for its headers. */}}
{{- define "nsfwdetector.edgeMaxRequestHeadersKb" -}}
${MAX_REQUEST_HEADER_BYTES / 1024}
{{- end -}}
{{- define "nsfwdetector.edgeMaxRequestHeaders" -}}
${MAX_REQUEST_HEADERS}
{{- end -}}
`;
}

// --- the CRD, whole.

export function renderCrd(): string {
  return DETECTION_POLICY_CRD_HEADER + toYaml(detectionPolicyCrd() as Parameters<typeof toYaml>[0]);
}

// --- docs/configuration.md, whole.

const SECTIONS: Record<Section, string> = {
  policy: 'Policy: thresholds, model and limits (a DetectionPolicy may change these)',
  uploads: 'Uploads and admission',
  scoring: 'Scoring',
  core: 'Every process',
  redis: 'Redis',
  ports: 'Ports and files',
  operator: 'Operator',
};

function defaultCell(s: Setting): string {
  if (s.type === 'string' && s.defaultDoc) return s.defaultDoc;
  if (s.default === undefined) return 'unset';
  return `\`${s.default === '' ? '""' : s.default}\``;
}

function rangeCell(s: Setting): string {
  const values = allowed(s);
  if (values) return values.map((v) => `\`${v}\``).join(', ');
  if (s.type === 'integer' || s.type === 'number') {
    const max = s.max !== undefined ? String(s.max) : '';
    const below = s.below ? `, < \`${s.below.setting}\`` : '';
    return `${s.min} – ${max || '…'}${below}`;
  }
  if (s.type === 'string' && s.minLength !== undefined) return `at least ${s.minLength} characters`;
  return s.type === 'string' && s.pattern ? `\`${s.pattern.replaceAll('|', '\\|')}\`` : '';
}

export function renderDocs(): string {
  const cell = (s: string) => s.replaceAll('|', '\\|');
  const out = [
    '# Configuration reference',
    '',
    '<!-- Generated from lib/common/settings.ts by `npm run settings`; do not edit by hand. -->',
    '',
    'Every process reads its settings from the environment once, at start, and refuses to start (exit',
    'code 2, one line naming the variable) on a value outside its range. A setting has one declaration, in',
    '`lib/common/settings.ts`; this page, the chart’s `config:` values and their schema, the pods’',
    'environment and the DetectionPolicy CRD are generated from it (`npm run settings`; CI runs',
    '`npm run settings -- --check`).',
    '',
    'What applies, for a setting a DetectionPolicy may change: the policy’s field when the policy in force',
    'states it; otherwise the variable, which the chart sets from its `config` value; otherwise the default',
    'below, the spec’s numbers. A policy group (`thresholds`, `anonymous`, `tiers.free`, `tiers.pro`) is',
    'given whole or left out, so the API server checks its rule (allow < block, per minute ≤ per day) on',
    'its own.',
    '',
  ];
  for (const [section, title] of Object.entries(SECTIONS) as Array<[Section, string]>) {
    const inSection = rows().filter(([, s]) => s.section === section);
    if (inSection.length === 0) continue;
    out.push(`## ${title}`, '');
    out.push('| Variable | Default | Range | Unit | Read by | Chart value | DetectionPolicy | Meaning |');
    out.push('| --- | --- | --- | --- | --- | --- | --- | --- |');
    for (const [name, s] of inSection) {
      const chart = s.chart
        ? `\`config.${s.chart.key}\`${s.chart.default !== undefined && s.chart.default !== s.default ? ` (\`${s.chart.default === '' ? '""' : s.chart.default}\`)` : ''}`
        : '';
      out.push(
        `| \`${name}\` | ${defaultCell(s)} | ${rangeCell(s)} | ${s.unit ?? ''} | ${s.readBy.join(', ')} | ${chart} | ${s.crd ? `\`spec.${s.crd}\`` : ''} | ${cell(s.doc)} |`,
      );
    }
    out.push('');
  }
  const body = edgeBody();
  out.push(
    '## Derived at the edge',
    '',
    'The chart computes these from the values above as the services compute them',
    '(`templates/_derived.tpl`, generated too):',
    '',
    `- a request whose \`Content-Length\` is over ${body.a} × \`config.maxFileBytes\` + ${body.b} bytes (detect’s bound on reading a refused body; ${body.a * SETTINGS.MAX_FILE_BYTES.default + body.b} by default) is refused by Envoy with 400/4003 without being read;`,
    `- request line and headers: at most ${MAX_REQUEST_HEADER_BYTES / 1024} KiB and ${MAX_REQUEST_HEADERS} headers (\`lib/common/http-limits.ts\`), past them 431/4310 before anything is counted.`,
    '',
  );
  return out.join('\n');
}

// --- all of them.

const read = (file: string) => readFileSync(`${ROOT}${file}`, 'utf8');

/** Every generated file's expected text, from the table and the files' current text. */
export function renderAll(readFile: (file: string) => string = read): Record<GeneratedFile, string> {
  checkTable();
  const values = renderValues(readFile(GENERATED.values));
  return {
    values,
    schema: renderSchema(readFile(GENERATED.schema)),
    workloads: renderWorkloads(readFile(GENERATED.workloads)),
    derived: renderDerived(),
    crd: renderCrd(),
    docs: renderDocs(),
    chartReadme: renderReadme(values),
  };
}

/** The generated files whose text is not what the table gives (missing ones included). */
export function staleFiles(readFile: (file: string) => string = read): GeneratedFile[] {
  const expected = renderAll(readFile);
  return (Object.keys(GENERATED) as GeneratedFile[]).filter((key) => {
    try {
      return readFile(GENERATED[key]) !== expected[key];
    } catch {
      return true;
    }
  });
}
