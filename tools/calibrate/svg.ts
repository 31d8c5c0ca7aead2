// The report's charts as standalone SVG files: small, dependency-free, readable in light and dark
// viewers (fixed white background, since an <img> SVG cannot follow the page's colour scheme).

const W = 480;
const H = 360;
const PAD = 48;

const esc = (s: string) => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
const x = (v: number) => PAD + v * (W - 2 * PAD);
const y = (v: number) => H - PAD - v * (H - 2 * PAD);

function frame(title: string, xLabel: string, yLabel: string, body: string): string {
  const ticks = [0, 0.25, 0.5, 0.75, 1]
    .map(
      (t) =>
        `<text x="${x(t)}" y="${H - PAD + 16}" text-anchor="middle">${t}</text>` +
        `<text x="${PAD - 6}" y="${y(t) + 4}" text-anchor="end">${t}</text>` +
        `<line x1="${x(t)}" y1="${y(0)}" x2="${x(t)}" y2="${y(1)}" stroke="#ddd"/>` +
        `<line x1="${x(0)}" y1="${y(t)}" x2="${x(1)}" y2="${y(t)}" stroke="#ddd"/>`,
    )
    .join('');
  return `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" font-family="sans-serif" font-size="12">
<title>${esc(title)}</title>
<rect width="${W}" height="${H}" fill="#fff"/>
<text x="${W / 2}" y="20" text-anchor="middle" font-size="15" font-weight="bold">${esc(title)}</text>
${ticks}
<rect x="${x(0)}" y="${y(1)}" width="${x(1) - x(0)}" height="${y(0) - y(1)}" fill="none" stroke="#333"/>
<text x="${W / 2}" y="${H - 8}" text-anchor="middle">${esc(xLabel)}</text>
<text x="14" y="${H / 2}" text-anchor="middle" transform="rotate(-90 14 ${H / 2})">${esc(yLabel)}</text>
${body}
</svg>
`;
}

export interface Series {
  label: string;
  color: string;
  points: ReadonlyArray<readonly [number, number]>;
}

function legend(series: readonly { label: string; color: string }[]): string {
  return series
    .map(
      (s, i) =>
        `<rect x="${x(0.62)}" y="${y(0.2) + i * 16}" width="12" height="12" fill="${s.color}"/>` +
        `<text x="${x(0.62) + 18}" y="${y(0.2) + i * 16 + 11}">${esc(s.label)}</text>`,
    )
    .join('');
}

/** A point drawn on a chart with its label (an operating point: the suggested thresholds). */
export interface Marker {
  label: string;
  color: string;
  at: readonly [number, number];
}

function markers(points: readonly Marker[]): string {
  return points
    .map(
      (m) =>
        `<circle cx="${x(m.at[0]).toFixed(1)}" cy="${y(m.at[1]).toFixed(1)}" r="5" fill="${m.color}" stroke="#000"/>` +
        `<text x="${(x(m.at[0]) + 8).toFixed(1)}" y="${(y(m.at[1]) + 14).toFixed(1)}" fill="#000">${esc(m.label)}</text>`,
    )
    .join('');
}

/** A vertical line across the plot at `at` (a threshold on the score axis), labelled at its top. */
export interface Rule {
  label: string;
  color: string;
  at: number;
}

function rules(lines: readonly Rule[]): string {
  return lines
    .map(
      (r, i) =>
        `<line x1="${x(r.at).toFixed(1)}" y1="${y(0)}" x2="${x(r.at).toFixed(1)}" y2="${y(1)}" stroke="${r.color}" stroke-width="2" stroke-dasharray="6 3"/>` +
        `<text x="${(x(r.at) + 4).toFixed(1)}" y="${(y(1) + 14 + i * 14).toFixed(1)}" fill="${r.color}">${esc(r.label)}</text>`,
    )
    .join('');
}

export function lineChart(
  title: string,
  xLabel: string,
  yLabel: string,
  series: readonly Series[],
  points: readonly Marker[] = [],
): string {
  const lines = series
    .map(
      (s) =>
        `<polyline fill="none" stroke="${s.color}" stroke-width="2" points="${s.points
          .map(([px, py]) => `${x(px).toFixed(1)},${y(py).toFixed(1)}`)
          .join(' ')}"/>`,
    )
    .join('\n');
  return frame(title, xLabel, yLabel, lines + markers(points) + legend(series));
}

/** Two histograms of shares (each class's counts over its own total), bars side by side per bin. */
export function histogramChart(
  title: string,
  classes: readonly { label: string; color: string; counts: readonly number[] }[],
  thresholds: readonly Rule[] = [],
): string {
  const bins = classes[0]?.counts.length ?? 0;
  const shares = classes.map((c) => {
    const total = c.counts.reduce((a, b) => a + b, 0) || 1;
    return c.counts.map((n) => n / total);
  });
  const max = Math.max(0.0001, ...shares.flat());
  const binW = 1 / bins;
  const barW = binW / classes.length;
  let bars = '';
  classes.forEach((c, ci) => {
    (shares[ci] ?? []).forEach((share, b) => {
      const h = share / max;
      bars += `<rect x="${x(b * binW + ci * barW).toFixed(1)}" y="${y(h).toFixed(1)}" width="${(barW * (W - 2 * PAD)).toFixed(1)}" height="${(y(0) - y(h)).toFixed(1)}" fill="${c.color}"/>`;
    });
  });
  return frame(
    title,
    'nsfw score',
    `share of class (max ${max.toFixed(2)})`,
    bars + rules(thresholds) + legend(classes),
  );
}
