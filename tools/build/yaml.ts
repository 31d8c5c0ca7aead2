// The YAML the generated files are written in: block maps and lists, lists of scalars in flow style,
// strings plain where YAML reads them back as the same string, double-quoted (JSON escapes) otherwise.
// Enough for the documents generated here (no anchors, no multi-line strings).

type Yaml = string | number | boolean | null | readonly Yaml[] | { readonly [key: string]: Yaml };

const PLAIN = /^[A-Za-z_/.][A-Za-z0-9_ ./(),;'`’<>=&|!*+-]*$/;
const RESERVED = /^(true|false|yes|no|on|off|null|y|n|~)$/i;

/** A scalar as YAML reads it back unchanged. */
export function yamlScalar(v: string | number | boolean | null): string {
  if (typeof v !== 'string') return String(v);
  if (PLAIN.test(v) && !RESERVED.test(v) && !v.endsWith(' ') && !/ #|: /.test(v)) return v;
  return JSON.stringify(v);
}

const isScalar = (v: Yaml): v is string | number | boolean | null => v === null || typeof v !== 'object';

function lines(v: Yaml, indent: string): string[] {
  if (Array.isArray(v)) {
    return (v as readonly Yaml[]).flatMap((item) => {
      if (isScalar(item)) return [`${indent}- ${yamlScalar(item)}`];
      const [first, ...rest] = lines(item, `${indent}  `);
      return [`${indent}- ${(first as string).trimStart()}`, ...rest];
    });
  }
  return Object.entries(v as { [key: string]: Yaml }).flatMap(([key, value]) => {
    const k = yamlScalar(key);
    if (isScalar(value)) return [`${indent}${k}: ${yamlScalar(value)}`];
    if (Array.isArray(value) && value.every(isScalar))
      return [`${indent}${k}: [${(value as Array<string | number>).map(yamlScalar).join(', ')}]`];
    if (Object.keys(value).length === 0) return [`${indent}${k}: ${Array.isArray(value) ? '[]' : '{}'}`];
    return [`${indent}${k}:`, ...lines(value, `${indent}  `)];
  });
}

export function toYaml(v: Yaml): string {
  return `${lines(v, '').join('\n')}\n`;
}

export type { Yaml };
