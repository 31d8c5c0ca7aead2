// Generates charts/nsfwdetector/README.md from values.yaml: every value with its default and the comment
// written above it (`# -- ` marks a description; a value without one takes its nearest commented parent's).
// `--check` exits 1 when the README is not current (test/chart/readme.test.ts runs it in CI).

import { readFileSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const CHART = fileURLToPath(new URL('../', import.meta.url));
export const README_PATH = `${CHART}README.md`;

export interface ValueDoc {
  key: string;
  default: string;
  description: string;
}

/** The documented values of a values.yaml text (block maps with scalar, flow or empty leaves). */
export function valueDocs(text: string): ValueDoc[] {
  const lines = text.split('\n');
  const docs: ValueDoc[] = [];
  const stack: { indent: number; key: string; description: string }[] = [];
  let comment: string[] = [];
  const seen = new Set<string>();
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i] as string;
    const commentMatch = /^\s*#\s?(.*)$/.exec(line);
    if (commentMatch) {
      comment.push((commentMatch[1] as string).replace(/^-- /, ''));
      continue;
    }
    const m = /^(\s*)([A-Za-z0-9_.-]+):\s*(.*)$/.exec(line);
    if (!m) {
      comment = [];
      continue;
    }
    const indent = (m[1] as string).length;
    const key = m[2] as string;
    const rest = (m[3] as string).replace(/\s+#.*$/, '').trim();
    while (stack.length && (stack.at(-1) as { indent: number }).indent >= indent) stack.pop();
    const own = comment.join(' ').trim();
    comment = [];
    const inherited = [...stack].reverse().find((s) => s.description)?.description ?? '';
    const path = [...stack.map((s) => s.key), key].join('.');
    // YAML keeps the last of two equal keys silently: a second block would hide the first.
    if (seen.has(path)) throw new Error(`values.yaml: ${path} is defined twice`);
    seen.add(path);
    if (rest === '') {
      stack.push({ indent, key, description: own });
      continue;
    }
    docs.push({ key: path, default: rest, description: own || inherited });
  }
  return docs;
}

export function renderReadme(values: string): string {
  const docs = valueDocs(values);
  const undocumented = docs.filter((d) => !d.description).map((d) => d.key);
  if (undocumented.length) throw new Error(`values.yaml: no description for ${undocumented.join(', ')}`);
  const cell = (s: string) => s.replaceAll('|', '\\|');
  const rows = docs.map((d) => `| \`${d.key}\` | \`${cell(d.default)}\` | ${cell(d.description)} |`);
  return `# nsfwdetector Helm chart

<!-- Generated from values.yaml by \`npx tsx charts/nsfwdetector/readme/generate.ts\`; do not edit by hand. -->

Self-hostable image moderation: Envoy (the only entry) with the quota-and-auth service as its ext_authz
sidecar, the detect service (HorizontalPodAutoscaler, PodDisruptionBudget), the health service, and
Redis (in-chart StatefulSet or external). Every pod runs under the Pod Security "restricted" profile.
See [docs/kubernetes.md](../../docs/kubernetes.md) in the repository.

\`\`\`sh
helm install nsfwdetector charts/nsfwdetector --namespace nsfwdetector --create-namespace
\`\`\`

values.schema.json refuses unknown keys and wrong types.

## Values

| Key | Default | Description |
| --- | --- | --- |
${rows.join('\n')}
`;
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const expected = renderReadme(readFileSync(`${CHART}values.yaml`, 'utf8'));
  if (process.argv.includes('--check')) {
    let current = '';
    try {
      current = readFileSync(README_PATH, 'utf8');
    } catch {
      // missing: not current
    }
    if (current !== expected) {
      console.error(
        'charts/nsfwdetector/README.md is not current: run npx tsx charts/nsfwdetector/readme/generate.ts',
      );
      process.exit(1);
    }
  } else {
    writeFileSync(README_PATH, expected);
  }
}
