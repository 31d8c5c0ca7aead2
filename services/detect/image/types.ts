// Shared vocabulary of the image pipeline: intake → sniff → probe (header only) → decode → model input.

/** Values of `image.format` (DESIGN.md): lowercase, from content only. */
export const IMAGE_FORMATS = ['jpeg', 'png', 'webp', 'bmp', 'tiff', 'gif'] as const;
export type ImageFormat = (typeof IMAGE_FORMATS)[number];

/** How messages name each format. */
export const FORMAT_NAMES: Record<ImageFormat, string> = {
  jpeg: 'JPEG',
  png: 'PNG',
  gif: 'GIF',
  webp: 'WebP',
  bmp: 'BMP',
  tiff: 'TIFF',
};

/** What the header says, read before any pixel is decoded. */
export interface ProbedImage {
  format: ImageFormat;
  /** Of the first frame, as stored (before EXIF rotation). */
  width: number;
  height: number;
  /** Frames / pages of the input; 1 for still images. */
  frames: number;
}

/** Per-format dimension limits of spec part 8 (configurable; these are the defaults). */
export interface DimensionLimits {
  jpeg: { maxEdge: number; maxPixels: number };
  other: { maxEdge: number; maxPixels: number };
}

export const DEFAULT_DIMENSION_LIMITS: DimensionLimits = {
  jpeg: { maxEdge: 30_000, maxPixels: 200_000_000 },
  other: { maxEdge: 8192, maxPixels: 36_000_000 },
};
