// Which parts of a decoded frame the model sees. nsfwjs squashes the whole frame into a square, so a
// blank margin dilutes the picture (a photo padded with 10 % white on each side scored 0.025 where
// the photo alone scored 0.253, mobilenet_v2) and a long strip smears its content over a few pixel
// rows (the same photo in a white strip of aspect ratio 3 scored 0.023). What a person sees is the
// picture, wherever it sits, so the layout finds it by what is in it (docs/models.md, "Tiles and
// margins"):
//
// - a line (row or column) is flat when nearly all its pixels lie close to the line's own mean colour:
//   a blank margin of any colour, with low-amplitude noise (FLAT_TOLERANCE) and crossed by thin frame
//   lines (FLAT_OUTLIER_SHARE of its pixels may differ);
// - the content box is what is left once the flat lines are peeled from each side, rows and columns in
//   turn until nothing more comes off (so a white top/left and a black bottom/right margin both go);
//   a frame whose every line is flat (blank, or a flag's stripes) is kept whole, and so is a frame whose
//   content would be a speck (under MIN_CONTENT_EDGE);
// - an ordinary-shaped frame with margins is scored twice, as its content box and whole, the highest
//   answering: trimming can then only add to what nsfwjs sees;
// - a strip (longer than TILE_ASPECT times its short edge) is first split along its long side into its
//   content runs: lines across the strip that are flat for at least SEGMENT_GAP short edges separate
//   two pictures, so a picture anywhere in a blank strip is found at its own scale; each run is trimmed
//   to its content box, and a box that is itself long is cut into overlapping tiles TILE_LENGTH short
//   edges long (each sharing two thirds of its length with the next), each trimmed again;
// - the boxes of a frame are at most `maxTiles` (MAX_TILES): runs past it are merged across their
//   narrowest gaps, and tiles past it grow longer instead, so the cost of every image stays bounded at
//   `maxTiles` inferences of each model (docs/image-cost.md, "Tiles, borders and frames").
//
// A frame with no margin and of ordinary shape is one box, the whole frame: scored exactly as nsfwjs.

export interface Box {
  left: number;
  top: number;
  width: number;
  height: number;
}

/** A flat line's pixels lie within this of the line's mean, per channel (noise of ±12, JPEG ringing). */
export const FLAT_TOLERANCE = 16;
/** Share of a flat line's pixels that may lie further (where thin frame lines or specks cross it). */
export const FLAT_OUTLIER_SHARE = 0.03;
/**
 * A margin counts only from this share of its edge: a flat band of sky along a photo's top (4.webp:
 * 3.7 %) or a thin frame is not a margin, and barely dilutes the picture when squashed.
 */
export const MIN_MARGIN_FRACTION = 0.05;
/** A content box narrower than this (px, or the whole edge if shorter) is a speck: the frame stays whole. */
export const MIN_CONTENT_EDGE = 32;
/**
 * Long / short edge above which the frame is tiled. Squashing already costs a photo most of its score
 * at 2 (measured); 2.5 leaves every ordinary shape (16:9, 2:1, 19.5:9 phone screens, 21:9) as nsfwjs
 * scores it.
 */
export const TILE_ASPECT = 2.5;
/**
 * A tile's length in short edges: 3:2, so that a 3:2 or 4:3 photo inside a strip can fill one tile;
 * a tile is squashed by at most this much, which moved no corpus photo's score measurably (docs/models.md).
 */
export const TILE_LENGTH = 1.5;
/** Flat lines across a strip, in short edges, that separate two content runs (less: one picture). */
export const SEGMENT_GAP = 0.5;

/** Whether `count` RGB pixels from byte `start`, `step` bytes apart, are flat (see FLAT_TOLERANCE). */
export function isFlatLine(rgb: Uint8Array, start: number, step: number, count: number): boolean {
  let r = 0;
  let g = 0;
  let b = 0;
  for (let i = 0, p = start; i < count; i++, p += step) {
    r += rgb[p] as number;
    g += rgb[p + 1] as number;
    b += rgb[p + 2] as number;
  }
  r /= count;
  g /= count;
  b /= count;
  const allowed = Math.floor(FLAT_OUTLIER_SHARE * count);
  let outliers = 0;
  for (let i = 0, p = start; i < count; i++, p += step) {
    if (
      Math.abs((rgb[p] as number) - r) > FLAT_TOLERANCE ||
      Math.abs((rgb[p + 1] as number) - g) > FLAT_TOLERANCE ||
      Math.abs((rgb[p + 2] as number) - b) > FLAT_TOLERANCE
    ) {
      outliers += 1;
      if (outliers > allowed) return false;
    }
  }
  return true;
}

/**
 * isFlatLine of every column of a frame, read row by row (a column read down a wide strip would touch
 * a cache line per pixel: 30,000 × 400 took 2.5 s so, ~0.1 s this way). 1: flat.
 */
function flatColumns(rgb: Uint8Array, width: number, height: number): Uint8Array {
  const sums = new Float64Array(width * 3);
  for (let y = 0, p = 0; y < height; y++)
    for (let i = 0; i < width * 3; i++, p++) sums[i] = (sums[i] as number) + (rgb[p] as number);
  for (let i = 0; i < sums.length; i++) sums[i] = (sums[i] as number) / height;
  const outliers = new Uint32Array(width);
  for (let y = 0, p = 0; y < height; y++) {
    for (let x = 0; x < width; x++, p += 3) {
      const m = x * 3;
      if (
        Math.abs((rgb[p] as number) - (sums[m] as number)) > FLAT_TOLERANCE ||
        Math.abs((rgb[p + 1] as number) - (sums[m + 1] as number)) > FLAT_TOLERANCE ||
        Math.abs((rgb[p + 2] as number) - (sums[m + 2] as number)) > FLAT_TOLERANCE
      )
        outliers[x] = (outliers[x] as number) + 1;
    }
  }
  const allowed = Math.floor(FLAT_OUTLIER_SHARE * height);
  return Uint8Array.from(outliers, (n) => (n <= allowed ? 1 : 0));
}

const sameBox = (a: Box, b: Box): boolean =>
  a.left === b.left && a.top === b.top && a.width === b.width && a.height === b.height;

/**
 * The content box of interleaved 8-bit RGB of frameWidth × frameHeight, or of the part `within` of it
 * (in the frame's coordinates either way): flat lines peeled from every side, rows and columns in turn.
 * `within` itself when every line is flat or the content would be a speck. `minFraction` is the share
 * of an edge from which a side's margin counts.
 */
export function contentBox(
  rgb: Uint8Array,
  frameWidth: number,
  frameHeight: number,
  within: Box = { left: 0, top: 0, width: frameWidth, height: frameHeight },
  minFraction = MIN_MARGIN_FRACTION,
): Box {
  const rowBytes = frameWidth * 3;
  const rowFlat = (y: number, x0: number, x1: number): boolean =>
    isFlatLine(rgb, y * rowBytes + x0 * 3, 3, x1 - x0);
  const columnFlat = (x: number, y0: number, y1: number): boolean =>
    isFlatLine(rgb, y0 * rowBytes + x * 3, rowBytes, y1 - y0);

  let left = within.left;
  let top = within.top;
  let right = within.left + within.width;
  let bottom = within.top + within.height;
  // Each pass peels what the other sides' margins hid (a full-height bar beside a full-width one).
  for (let pass = 0; pass < 4; pass++) {
    const before = [left, top, right, bottom].join();
    let t = top;
    while (t < bottom && rowFlat(t, left, right)) t++;
    if (t === bottom) break; // every row flat: nothing to find inside
    let b = bottom;
    while (b > t && rowFlat(b - 1, left, right)) b--;
    let l = left;
    while (l < right && columnFlat(l, t, b)) l++;
    if (l === right) break;
    let r = right;
    while (r > l && columnFlat(r - 1, t, b)) r--;
    [left, top, right, bottom] = [l, t, r, b];
    if ([left, top, right, bottom].join() === before) break;
  }
  // A side's margin counts only from minFraction of its edge.
  const counted = (margin: number, edge: number): number =>
    margin >= Math.max(1, minFraction * edge) ? margin : 0;
  const l = counted(left - within.left, within.width);
  const r = counted(within.left + within.width - right, within.width);
  const t = counted(top - within.top, within.height);
  const b = counted(within.top + within.height - bottom, within.height);
  const box = {
    left: within.left + l,
    top: within.top + t,
    width: within.width - l - r,
    height: within.height - t - b,
  };
  const speck =
    box.width < Math.min(MIN_CONTENT_EDGE, within.width) ||
    box.height < Math.min(MIN_CONTENT_EDGE, within.height);
  return speck ? within : box;
}

/** The natural tile count of `box`: tiles TILE_LENGTH short edges long, each a third of one after the last. */
function naturalTiles(box: Box): number {
  if (!isLongBox(box)) return 1;
  const long = Math.max(box.width, box.height);
  const short = Math.min(box.width, box.height);
  return Math.max(2, Math.ceil((3 * long) / (TILE_LENGTH * short) - 2));
}

/**
 * Overlapping tiles along the long side of `box`, each TILE_LENGTH times as long as the short side and
 * sharing two thirds of its length with the next (so whatever fits in a square of the short edge lies
 * whole in some tile), at most `maxTiles` (past it the tiles grow longer); `[box]` itself when it is
 * not long.
 */
export function tileBoxes(box: Box, maxTiles: number): Box[] {
  const horizontal = box.width >= box.height;
  const long = horizontal ? box.width : box.height;
  const short = horizontal ? box.height : box.width;
  if (!isLongBox(box) || maxTiles < 2) return [box];
  // n tiles of length L, each a third of L after the last, cover (n + 2)·L/3; past maxTiles they grow longer.
  const n = Math.min(maxTiles, naturalTiles(box));
  const length = Math.min(long, Math.max(Math.round(TILE_LENGTH * short), Math.ceil((3 * long) / (n + 2))));
  const stride = (long - length) / (n - 1);
  const tiles: Box[] = [];
  for (let i = 0; i < n; i++) {
    const offset = Math.round(i * stride);
    tiles.push(
      horizontal
        ? { left: box.left + offset, top: box.top, width: length, height: short }
        : { left: box.left, top: box.top + offset, width: short, height: length },
    );
  }
  return tiles;
}

/** Longer than TILE_ASPECT times its short edge, whichever way it lies. */
export const isLongBox = (box: { width: number; height: number }): boolean =>
  Math.max(box.width, box.height) > TILE_ASPECT * Math.min(box.width, box.height);

/**
 * The content runs along the long side of a strip, as boxes across its whole short edge: runs of lines
 * that are not flat, apart where SEGMENT_GAP short edges of flat lines separate them; at most
 * `maxRuns` (the narrowest gaps closed first); runs shorter than MIN_CONTENT_EDGE are specks, left out
 * when a longer run exists. The whole frame when nothing is found.
 */
export function contentRuns(rgb: Uint8Array, width: number, height: number, maxRuns: number): Box[] {
  const horizontal = width >= height;
  const long = horizontal ? width : height;
  const short = horizontal ? height : width;
  const columns = horizontal ? flatColumns(rgb, width, height) : undefined;
  const lineFlat = (i: number): boolean =>
    columns ? columns[i] === 1 : isFlatLine(rgb, i * width * 3, 3, width);
  const gap = Math.max(1, Math.round(SEGMENT_GAP * short));
  let runs: Array<[number, number]> = [];
  for (let i = 0; i < long; ) {
    if (lineFlat(i)) {
      i++;
      continue;
    }
    let end = i + 1;
    let flatSince = -1;
    for (; end < long; end++) {
      if (!lineFlat(end)) {
        flatSince = -1;
        continue;
      }
      if (flatSince < 0) flatSince = end;
      if (end - flatSince + 1 >= gap) break;
    }
    const stop = flatSince >= 0 ? flatSince : end;
    runs.push([i, stop]);
    i = end;
  }
  const solid = runs.filter(([a, b]) => b - a >= Math.min(MIN_CONTENT_EDGE, short));
  if (solid.length > 0) runs = solid;
  if (runs.length === 0) return [{ left: 0, top: 0, width, height }];
  while (runs.length > Math.max(1, maxRuns)) {
    let narrowest = 0;
    for (let k = 1; k < runs.length - 1; k++) {
      const gapAt = (j: number) => (runs[j + 1] as [number, number])[0] - (runs[j] as [number, number])[1];
      if (gapAt(k) < gapAt(narrowest)) narrowest = k;
    }
    const [a, b] = [runs[narrowest] as [number, number], runs[narrowest + 1] as [number, number]];
    runs.splice(narrowest, 2, [a[0], b[1]]);
  }
  return runs.map(([a, b]) =>
    horizontal ? { left: a, top: 0, width: b - a, height } : { left: 0, top: a, width, height: b - a },
  );
}

/** Shares `maxTiles` among boxes (at least one each, the rest to whichever is most squashed). */
function shareTiles(boxes: readonly Box[], maxTiles: number): number[] {
  const wanted = boxes.map(naturalTiles);
  if (wanted.reduce((n, w) => n + w, 0) <= maxTiles) return wanted;
  const given = boxes.map(() => 1);
  for (let spare = maxTiles - boxes.length; spare > 0; spare--) {
    let most = -1;
    for (let k = 0; k < boxes.length; k++) {
      if ((given[k] as number) >= (wanted[k] as number)) continue;
      if (
        most < 0 ||
        (wanted[k] as number) / (given[k] as number) > (wanted[most] as number) / (given[most] as number)
      )
        most = k;
    }
    if (most < 0) break;
    given[most] = (given[most] as number) + 1;
  }
  return given;
}

/**
 * What the model sees of a decoded frame (see the header): the whole frame alone when it is of ordinary
 * shape without margins; its content box and the whole frame when it has margins; the content runs of
 * a strip, trimmed, long ones cut into trimmed tiles. At most `maxTiles` boxes (1: trimmed, never
 * tiled, never scored whole beside).
 */
export function frameLayout(rgb: Uint8Array, width: number, height: number, maxTiles: number): Box[] {
  const frame = { left: 0, top: 0, width, height };
  const budget = Math.max(1, maxTiles);
  if (!isLongBox(frame)) {
    const box = contentBox(rgb, width, height);
    if (sameBox(box, frame)) return [frame];
    if (isLongBox(box)) return tilesOf(rgb, width, height, [box], budget);
    return budget >= 2 ? [box, frame] : [box];
  }
  const boxes = contentRuns(rgb, width, height, budget).map((run) => contentBox(rgb, width, height, run));
  return tilesOf(rgb, width, height, boxes, budget);
}

/** The boxes, each long one cut into its share of `maxTiles` tiles, each tile trimmed to its content. */
function tilesOf(
  rgb: Uint8Array,
  width: number,
  height: number,
  boxes: readonly Box[],
  maxTiles: number,
): Box[] {
  const shares = shareTiles(boxes, maxTiles);
  return boxes.flatMap((box, k) => {
    const tiles = tileBoxes(box, shares[k] as number);
    return tiles.length === 1 ? tiles : tiles.map((tile) => contentBox(rgb, width, height, tile));
  });
}

export const isWholeFrame = (boxes: readonly Box[], width: number, height: number): boolean =>
  boxes.length === 1 &&
  boxes[0]?.left === 0 &&
  boxes[0].top === 0 &&
  boxes[0].width === width &&
  boxes[0].height === height;

/** The pixels of `box`, copied out of interleaved RGB of the given width. */
export function cropRgb(rgb: Uint8Array, width: number, box: Box): Uint8Array {
  if (box.left === 0 && box.width === width) {
    return rgb.subarray(box.top * width * 3, (box.top + box.height) * width * 3);
  }
  const out = new Uint8Array(box.width * box.height * 3);
  const rowBytes = box.width * 3;
  for (let y = 0; y < box.height; y++) {
    const from = ((box.top + y) * width + box.left) * 3;
    out.set(rgb.subarray(from, from + rowBytes), y * rowBytes);
  }
  return out;
}
