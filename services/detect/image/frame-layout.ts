// Which parts of a decoded frame the model sees. nsfwjs squashes the whole frame into a square, so a
// uniform margin dilutes the picture (a photo padded with 10 % white on each side scored 0.025 where
// the photo alone scored 0.253, mobilenet_v2) and a long strip smears its content over a few pixel
// rows (the same photo in a white strip of aspect ratio 3 scored 0.023). Two corrections, measured in
// docs/models.md ("Tiles and margins"):
//
// - near-uniform margins are trimmed: a side's margin is the run of outer lines (rows or columns)
//   whose every pixel is within MARGIN_TOLERANCE of that side's corner pixel, counted only when at
//   least MIN_MARGIN_FRACTION of the edge, and never more than a quarter of the edge per side (so at
//   least half of each edge stays: a real image is never cropped into nothing); opposite margins of
//   different colours are kept (a flag's stripes are picture, not padding);
// - a content box longer than TILE_ASPECT times its width is cut into overlapping near-square tiles
//   (TILE_LENGTH) along its long side (each shares two thirds of its length with the next), at most
//   `maxTiles`: past that the tiles grow longer instead, so the cost of the longest allowed image stays
//   bounded; each tile is trimmed of its own margins, keeping at least half its short edge each way.
//
// A frame with no margin and of ordinary shape is one box, the whole frame: scored exactly as nsfwjs.

export interface Box {
  left: number;
  top: number;
  width: number;
  height: number;
}

/** A margin pixel differs from its side's corner pixel by at most this, per channel (JPEG noise). */
export const MARGIN_TOLERANCE = 8;
/** A margin counts only from this share of its edge: a thin frame line or a flat sky row is kept. */
export const MIN_MARGIN_FRACTION = 0.02;
/** At most this share of an edge is trimmed per side. */
export const MAX_MARGIN_FRACTION = 0.25;
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

/** Uniform lines from the outside in, along one side; `line(i)` is false at the first non-uniform line. */
function run(limit: number, uniform: (i: number) => boolean): number {
  let n = 0;
  while (n < limit && uniform(n)) n++;
  return n;
}

/**
 * The box left after trimming near-uniform margins from interleaved 8-bit RGB of width × height, or from
 * the part `within` of it (the box is in the frame's coordinates either way). `minFraction` is the share
 * of an edge from which a margin counts; `keep` what must stay of each edge (default: half).
 */
export function contentBox(
  rgb: Uint8Array,
  frameWidth: number,
  frameHeight: number,
  minFraction = MIN_MARGIN_FRACTION,
  keep?: { width: number; height: number },
  within: Box = { left: 0, top: 0, width: frameWidth, height: frameHeight },
): Box {
  const { width, height } = within;
  const kept = keep ?? {
    width: Math.ceil(width * (1 - 2 * MAX_MARGIN_FRACTION)),
    height: Math.ceil(height * (1 - 2 * MAX_MARGIN_FRACTION)),
  };
  const near = (a: number, b: number): boolean =>
    Math.abs((rgb[a] as number) - (rgb[b] as number)) <= MARGIN_TOLERANCE &&
    Math.abs((rgb[a + 1] as number) - (rgb[b + 1] as number)) <= MARGIN_TOLERANCE &&
    Math.abs((rgb[a + 2] as number) - (rgb[b + 2] as number)) <= MARGIN_TOLERANCE;
  const at = (x: number, y: number): number => ((within.top + y) * frameWidth + within.left + x) * 3;
  const rowUniform = (y: number, ref: number): boolean => {
    for (let x = 0; x < width; x++) if (!near(at(x, y), ref)) return false;
    return true;
  };
  const columnUniform = (x: number, ref: number, top: number, bottom: number): boolean => {
    for (let y = top; y < bottom; y++) if (!near(at(x, y), ref)) return false;
    return true;
  };
  const counted = (n: number, edge: number): number => (n >= Math.max(1, minFraction * edge) ? n : 0);
  const maxRows = Math.max(0, Math.floor((height - kept.height) / 2));
  const maxColumns = Math.max(0, Math.floor((width - kept.width) / 2));

  // Opposite margins of different colours are not padding but picture (a flag's stripes): neither counts.
  const pair = (a: number, aRef: number, b: number, bRef: number): [number, number] =>
    a > 0 && b > 0 && !near(aRef, bRef) ? [0, 0] : [a, b];

  const topRef = at(0, 0);
  const bottomRef = at(width - 1, height - 1);
  const [top, bottom] = pair(
    counted(
      run(maxRows, (i) => rowUniform(i, topRef)),
      height,
    ),
    topRef,
    counted(
      run(maxRows, (i) => rowUniform(height - 1 - i, bottomRef)),
      height,
    ),
    bottomRef,
  );
  // Columns are judged over the rows that remain, so a top bar of another colour does not hide a side margin.
  const y0 = top;
  const y1 = height - bottom;
  const leftRef = at(0, y0);
  const rightRef = at(width - 1, y1 - 1);
  const [left, right] = pair(
    counted(
      run(maxColumns, (i) => columnUniform(i, leftRef, y0, y1)),
      width,
    ),
    leftRef,
    counted(
      run(maxColumns, (i) => columnUniform(width - 1 - i, rightRef, y0, y1)),
      width,
    ),
    rightRef,
  );
  return {
    left: within.left + left,
    top: within.top + top,
    width: width - left - right,
    height: height - top - bottom,
  };
}

/**
 * Overlapping tiles along the long side of `box`, each TILE_LENGTH times as long as the short side and
 * sharing two thirds of its length with the next (so whatever fits in a square of the short edge lies
 * whole in some tile); `[box]` itself when it is not long.
 */
export function tileBoxes(box: Box, maxTiles: number): Box[] {
  const horizontal = box.width >= box.height;
  const long = horizontal ? box.width : box.height;
  const short = horizontal ? box.height : box.width;
  if (!isLongBox(box) || maxTiles < 2) return [box];
  // n tiles of length L, each a third of L after the last, cover (n + 2)·L/3; past maxTiles they grow longer.
  const n = Math.min(maxTiles, Math.ceil((3 * long) / (TILE_LENGTH * short) - 2));
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
 * What the model sees of a decoded frame: one box (the frame less its margins), or tiles. A long frame
 * is tiled whole and each tile trimmed of its own margins (a picture inside a blank strip then fills
 * its tile, where trimming the strip first would stop at half its length and leave it long no more);
 * a frame that is long only once trimmed is tiled from its trimmed box.
 */
export function frameLayout(rgb: Uint8Array, width: number, height: number, maxTiles: number): Box[] {
  const frame = { left: 0, top: 0, width, height };
  const tiles = tileBoxes(isLongBox(frame) ? frame : contentBox(rgb, width, height), maxTiles);
  if (tiles.length === 1) return tiles;
  // A tile may lose more than a frame may: down to half the frame's short edge each way.
  const keep = Math.ceil(Math.min(tiles[0]?.width ?? 0, tiles[0]?.height ?? 0) / 2);
  return tiles.map((tile) =>
    contentBox(rgb, width, height, MIN_MARGIN_FRACTION, { width: keep, height: keep }, tile),
  );
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
