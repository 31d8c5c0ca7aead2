// Pillow's bilinear resize of an 8-bit RGB image, ported bit for bit from its C code
// (libImaging/Resample.c: precompute_coeffs, normalize_coeffs_8bpc, ImagingResampleHorizontal_8bpc,
// ImagingResampleVertical_8bpc). open_nsfw's reference preprocessing resizes with
// `Image.resize(..., Image.BILINEAR)`, and libvips's linear kernel differs from it (other rounding of
// the filter taps, other fixed-point precision): only the same arithmetic gives the same pixels.
//
// Pillow's "bilinear" is a triangle filter whose support grows with the reduction factor (an
// area-weighted average when shrinking), in two separable passes: horizontal first, over only the rows
// the vertical pass reads, each pass rounding to 8 bits. Coefficients are normalised doubles turned into
// 22-bit fixed point; sums start at one half and are clipped to [0, 255].

const PRECISION_BITS = 32 - 8 - 2;
const ONE = 2 ** PRECISION_BITS;
const HALF = 2 ** (PRECISION_BITS - 1);
const CLIP_HIGH = 2 ** (PRECISION_BITS + 8);

interface Coefficients {
  /** Kernel length per output pixel (the stride of `taps`). */
  ksize: number;
  /** First input index and number of taps, per output pixel. */
  first: Int32Array;
  count: Int32Array;
  /** Fixed-point taps, `ksize` per output pixel. */
  taps: Int32Array;
}

const triangle = (x: number): number => {
  const a = Math.abs(x);
  return a < 1 ? 1 - a : 0;
};

/** precompute_coeffs + normalize_coeffs_8bpc for the whole input range (no box). */
function coefficients(inSize: number, outSize: number): Coefficients {
  const scale = inSize / outSize;
  const filterscale = Math.max(scale, 1);
  const support = 1 * filterscale;
  const ksize = Math.ceil(support) * 2 + 1;
  const first = new Int32Array(outSize);
  const count = new Int32Array(outSize);
  const taps = new Int32Array(outSize * ksize);
  const k = new Float64Array(ksize);
  const ss = 1 / filterscale;
  for (let xx = 0; xx < outSize; xx++) {
    const center = (xx + 0.5) * scale;
    // C's (int) cast truncates toward zero.
    const xmin = Math.max(0, Math.trunc(center - support + 0.5));
    const xmax = Math.min(inSize, Math.trunc(center + support + 0.5)) - xmin;
    let ww = 0;
    for (let x = 0; x < xmax; x++) {
      const w = triangle((x + xmin - center + 0.5) * ss);
      k[x] = w;
      ww += w;
    }
    for (let x = 0; x < ksize; x++) {
      const v = x < xmax ? (ww !== 0 ? (k[x] as number) / ww : (k[x] as number)) : 0;
      taps[xx * ksize + x] = v < 0 ? Math.trunc(-0.5 + v * ONE) : Math.trunc(0.5 + v * ONE);
    }
    first[xx] = xmin;
    count[xx] = xmax;
  }
  return { ksize, first, count, taps };
}

const clip8 = (v: number): number => (v >= CLIP_HIGH ? 255 : v <= 0 ? 0 : Math.floor(v / ONE));

/** One horizontal pass over `rows` rows of `src` starting at row `firstRow`. */
function horizontalPass(
  src: Uint8Array,
  width: number,
  firstRow: number,
  rows: number,
  outWidth: number,
  { ksize, first, count, taps }: Coefficients,
): Uint8Array {
  const out = new Uint8Array(outWidth * rows * 3);
  for (let y = 0; y < rows; y++) {
    const row = (y + firstRow) * width * 3;
    for (let xx = 0; xx < outWidth; xx++) {
      const xmin = first[xx] as number;
      const n = count[xx] as number;
      const kk = xx * ksize;
      let s0 = HALF;
      let s1 = HALF;
      let s2 = HALF;
      for (let x = 0; x < n; x++) {
        const t = taps[kk + x] as number;
        const p = row + (x + xmin) * 3;
        s0 += (src[p] as number) * t;
        s1 += (src[p + 1] as number) * t;
        s2 += (src[p + 2] as number) * t;
      }
      const o = (y * outWidth + xx) * 3;
      out[o] = clip8(s0);
      out[o + 1] = clip8(s1);
      out[o + 2] = clip8(s2);
    }
  }
  return out;
}

/** One vertical pass; `rowOffset`: the first input row `src` holds. */
function verticalPass(
  src: Uint8Array,
  width: number,
  rowOffset: number,
  outHeight: number,
  { ksize, first, count, taps }: Coefficients,
): Uint8Array {
  const out = new Uint8Array(width * outHeight * 3);
  const stride = width * 3;
  for (let yy = 0; yy < outHeight; yy++) {
    const ymin = (first[yy] as number) - rowOffset;
    const n = count[yy] as number;
    const kk = yy * ksize;
    for (let xx = 0; xx < width; xx++) {
      let s0 = HALF;
      let s1 = HALF;
      let s2 = HALF;
      for (let y = 0; y < n; y++) {
        const t = taps[kk + y] as number;
        const p = (y + ymin) * stride + xx * 3;
        s0 += (src[p] as number) * t;
        s1 += (src[p + 1] as number) * t;
        s2 += (src[p + 2] as number) * t;
      }
      const o = (yy * width + xx) * 3;
      out[o] = clip8(s0);
      out[o + 1] = clip8(s1);
      out[o + 2] = clip8(s2);
    }
  }
  return out;
}

/**
 * `Image.resize((outWidth, outHeight), Image.BILINEAR)` of an RGB image, 3 bytes per pixel
 * interleaved, rows top to bottom. Bit-identical to Pillow 13's output (the version the parity test
 * pins); older releases always ran the horizontal pass first, which parts some pixels by one level.
 */
export function pilBilinearResize(
  rgb: Uint8Array,
  width: number,
  height: number,
  outWidth: number,
  outHeight: number,
): Uint8Array {
  if (width < 1 || height < 1 || rgb.length < width * height * 3) throw new RangeError('invalid RGB buffer');
  if (!Number.isInteger(outWidth) || !Number.isInteger(outHeight) || outWidth < 1 || outHeight < 1) {
    throw new RangeError(`invalid size ${outWidth}x${outHeight}`);
  }
  // Pillow runs a pass only where its size changes.
  const horizontal = outWidth !== width ? coefficients(width, outWidth) : undefined;
  const vertical = outHeight !== height ? coefficients(height, outHeight) : undefined;
  if (!horizontal && !vertical) return rgb.slice(0, width * height * 3);
  // Pillow's order: vertical first when the height shrinks by more than twice what the width does.
  const horizontalFirst = !(height - outHeight > 0 && height - outHeight > (width - outWidth) * 2);
  if (!horizontalFirst) {
    const shrunk = vertical ? verticalPass(rgb, width, 0, outHeight, vertical) : rgb;
    return horizontal ? horizontalPass(shrunk, width, 0, outHeight, outWidth, horizontal) : shrunk;
  }
  if (!horizontal) return verticalPass(rgb, width, 0, outHeight, vertical as Coefficients);
  // Only the input rows the vertical pass reads.
  const firstRow = vertical ? (vertical.first[0] as number) : 0;
  const lastRow = vertical
    ? (vertical.first[outHeight - 1] as number) + (vertical.count[outHeight - 1] as number)
    : height;
  const wide = horizontalPass(rgb, width, firstRow, lastRow - firstRow, outWidth, horizontal);
  return vertical ? verticalPass(wide, outWidth, firstRow, outHeight, vertical) : wide;
}
