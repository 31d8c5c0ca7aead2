// Shared vocabulary of the image pipeline: intake → sniff → probe (header only) → decode → model input.
// The formats themselves are rows of lib/common/image-formats.ts.

import { FORMATS, type ImageFormat, type LimitClass } from '../../../lib/common/image-formats.ts';
import { SETTINGS } from '../../../lib/common/settings.ts';

export { IMAGE_FORMATS, type ImageFormat } from '../../../lib/common/image-formats.ts';

/** What the header says, read before any pixel is decoded. */
export interface ProbedImage {
  format: ImageFormat;
  /** Of the first frame, as stored (before EXIF rotation). */
  width: number;
  height: number;
  /** Frames / pages of the input; 1 for still images. */
  frames: number;
}

/** The dimension limits of spec part 8 (configurable), by the class a format's row names. */
export type DimensionLimits = Record<LimitClass, { maxEdge: number; maxPixels: number }>;

/** The settings' defaults (JPEG_MAX_*, OTHER_MAX_*), for callers that are handed no configuration. */
export const DEFAULT_DIMENSION_LIMITS: DimensionLimits = {
  jpeg: { maxEdge: SETTINGS.JPEG_MAX_EDGE.default, maxPixels: SETTINGS.JPEG_MAX_PIXELS.default },
  other: { maxEdge: SETTINGS.OTHER_MAX_EDGE.default, maxPixels: SETTINGS.OTHER_MAX_PIXELS.default },
};

/** The limits that apply to a format. */
export const limitsOf = (limits: DimensionLimits, format: ImageFormat): DimensionLimits[LimitClass] =>
  limits[FORMATS[format].limits];
