// A released chart names its images by digest in its own values.yaml, so that `helm install` of the
// OCI chart pulls exactly what was built, signed and scanned. The file is edited line by line (its
// comments are the chart's documentation: `helm show values`), each key found by its path.
// usage: tsx tools/release/chart-values.ts VALUES_YAML KEY.PATH=VALUE...

import { readFileSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

/** `yaml` with each `path` (dotted keys of block mappings) set to its string value, quoted. */
export function setValues(yaml: string, values: Record<string, string>): string {
  const left = new Map(Object.entries(values));
  const path: { indent: number; key: string }[] = [];
  const lines = yaml.split('\n').map((line) => {
    const m = /^( *)([A-Za-z0-9_]+):(.*)$/.exec(line);
    if (!m) return line;
    const indent = (m[1] as string).length;
    while (path.length > 0 && (path.at(-1)?.indent ?? 0) >= indent) path.pop();
    path.push({ indent, key: m[2] as string });
    const dotted = path.map((p) => p.key).join('.');
    const value = left.get(dotted);
    if (value === undefined) return line;
    if ((m[3] as string).trim() === '')
      throw new Error(`${dotted} is a mapping in the chart's values, not a value`);
    left.delete(dotted);
    return `${m[1]}${m[2]}: ${JSON.stringify(value)}`;
  });
  if (left.size > 0) throw new Error(`not in the chart's values: ${[...left.keys()].join(', ')}`);
  return lines.join('\n');
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const [file, ...pairs] = process.argv.slice(2);
  if (!file || pairs.length === 0) throw new Error('usage: chart-values.ts VALUES_YAML KEY.PATH=VALUE...');
  const values = Object.fromEntries(
    pairs.map((p) => {
      const at = p.indexOf('=');
      if (at < 1) throw new Error(`not KEY.PATH=VALUE: ${p}`);
      return [p.slice(0, at), p.slice(at + 1)];
    }),
  );
  writeFileSync(file, setValues(readFileSync(file, 'utf8'), values));
}
