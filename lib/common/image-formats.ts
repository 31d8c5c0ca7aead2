// The image formats the service accepts, as one table: a row per format. The sniffer (signature,
// file-type's MIME types), intake (the declared Content-Types), the OpenAPI document (raw body types,
// `image.format`), the 4002 message, the settings' docs (which limits apply), the probe and the decoders
// (limits, decoder, frame reader) all read it. A leaf: the settings and the error table read it too.

/** Which of the dimension limits apply (settings JPEG_MAX_* or OTHER_MAX_*). */
export type LimitClass = 'jpeg' | 'other';

/**
 * How frames after the first are read when MAX_FRAMES_SCORED asks for them (image/frames.ts): `none`,
 * a still image; `replayed`, sharp's pages, frame i drawn over the i before it (decoding i + 1
 * canvases); `pages`, sharp's pages, each decoded alone at its own size; `apng`, image/apng.ts, which
 * replays the animation once for all the frames scored.
 */
export type FrameReader = 'none' | 'replayed' | 'pages' | 'apng';

export interface FormatRow {
  /** How messages and docs name it. */
  name: string;
  /** Whether the bytes carry its signature: our own check, stricter than file-type where that is loose. */
  signature(bytes: Uint8Array): boolean;
  /** Its media type: a raw request body's Content-Type in the OpenAPI document. */
  mime: string;
  /** Other declared Content-Types that name it (refused when they contradict the bytes: 4001). */
  mimeAliases: readonly string[];
  /** The MIME types file-type reports for it (the sniffer trusts none it does not list). */
  sniffedAs: readonly string[];
  limits: LimitClass;
  /**
   * The libvips loader sharp decodes it with (decode.ts allows these alone, process-wide), or image/bmp.ts,
   * whose pixels then reach sharp raw.
   */
  decoder: `VipsForeignLoad${string}Buffer` | 'bmp.ts';
  /**
   * How strict libvips is (sharp's failOn), measured on the corpus and on truncated copies of it.
   * JPEG: 'warning'. A JPEG whose scan data stops early but ends with EOI ("premature end of data
   * segment"), a corrupt Huffman stream or a bad restart marker are only libjpeg *warnings*: at 'error'
   * the rest of the canvas is filled with grey and scored (decode.ts lets the few warnings that lose no
   * pixel through). PNG, GIF, WebP: 'error' already refuses every truncation measured (also with IEND,
   * the GIF trailer or a patched RIFF size appended); 'warning' caught nothing more, and would refuse
   * real PNGs for libpng's harmless warnings ("known incorrect sRGB profile"). TIFF: 'error' (libtiff
   * warns about unknown tags of valid files: the corpus GeoTIFF bonne.geo.tif); cut-off TIFF data is
   * refused from the IFD instead (checkImageData in probe.ts). ('truncated' is *weaker* than 'error' in
   * sharp's order: none < truncated < error < warning.)
   */
  failOn: 'error' | 'warning';
  frames: FrameReader;
}

function startsWith(bytes: Uint8Array, prefix: readonly number[], offset = 0): boolean {
  if (bytes.length < offset + prefix.length) return false;
  for (let i = 0; i < prefix.length; i++) if (bytes[offset + i] !== prefix[i]) return false;
  return true;
}

const ascii = (s: string): number[] => Array.from(s, (c) => c.charCodeAt(0));

/** BITMAPCOREHEADER, OS/2 v2 short, INFO, V2, V3, OS/2 v2, V4, V5. */
const BMP_DIB_HEADER_SIZES = new Set([12, 16, 40, 52, 56, 64, 108, 124]);

/** Values of `image.format` (DESIGN.md): lowercase, from content only; in the order docs list them. */
export const FORMATS = {
  jpeg: {
    name: 'JPEG',
    signature: (b) => startsWith(b, [0xff, 0xd8, 0xff]),
    mime: 'image/jpeg',
    mimeAliases: ['image/jpg'],
    sniffedAs: ['image/jpeg'],
    limits: 'jpeg',
    decoder: 'VipsForeignLoadJpegBuffer',
    failOn: 'warning',
    frames: 'none',
  },
  png: {
    name: 'PNG',
    signature: (b) => startsWith(b, [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]),
    mime: 'image/png',
    mimeAliases: [],
    // APNG: its default image (the first frame), or frames read by apng.ts.
    sniffedAs: ['image/png', 'image/apng'],
    limits: 'other',
    decoder: 'VipsForeignLoadPngBuffer',
    failOn: 'error',
    frames: 'apng',
  },
  webp: {
    name: 'WebP',
    signature: (b) => startsWith(b, ascii('RIFF')) && startsWith(b, ascii('WEBP'), 8),
    mime: 'image/webp',
    mimeAliases: [],
    sniffedAs: ['image/webp'],
    limits: 'other',
    decoder: 'VipsForeignLoadWebpBuffer',
    failOn: 'error',
    frames: 'replayed',
  },
  bmp: {
    name: 'BMP',
    // "BM" alone matches plenty of text (and is all file-type checks): a known DIB header size as well.
    signature: (b) =>
      startsWith(b, [0x42, 0x4d]) &&
      b.length >= 18 &&
      BMP_DIB_HEADER_SIZES.has(new DataView(b.buffer, b.byteOffset, b.byteLength).getUint32(14, true)),
    mime: 'image/bmp',
    mimeAliases: ['image/x-ms-bmp', 'image/x-bmp'],
    sniffedAs: ['image/bmp'],
    limits: 'other',
    decoder: 'bmp.ts',
    failOn: 'error', // unused: its pixels reach sharp raw
    frames: 'none',
  },
  tiff: {
    name: 'TIFF',
    // Classic TIFF (42) and BigTIFF (43), both byte orders.
    signature: (b) =>
      startsWith(b, [0x49, 0x49, 0x2a, 0x00]) ||
      startsWith(b, [0x4d, 0x4d, 0x00, 0x2a]) ||
      startsWith(b, [0x49, 0x49, 0x2b, 0x00]) ||
      startsWith(b, [0x4d, 0x4d, 0x00, 0x2b]),
    mime: 'image/tiff',
    mimeAliases: [],
    sniffedAs: ['image/tiff'],
    limits: 'other',
    decoder: 'VipsForeignLoadTiffBuffer',
    failOn: 'error',
    frames: 'pages',
  },
  gif: {
    name: 'GIF',
    signature: (b) => startsWith(b, ascii('GIF87a')) || startsWith(b, ascii('GIF89a')),
    mime: 'image/gif',
    mimeAliases: [],
    sniffedAs: ['image/gif'],
    limits: 'other',
    decoder: 'VipsForeignLoadNsgifBuffer',
    failOn: 'error',
    frames: 'replayed',
  },
} as const satisfies Record<string, FormatRow>;

export type ImageFormat = keyof typeof FORMATS;
export const IMAGE_FORMATS = Object.keys(FORMATS) as readonly ImageFormat[];

/** A format's row, as its general type. */
export const formatRow = (format: ImageFormat): FormatRow => FORMATS[format];

/** The formats' names as prose: "JPEG, PNG or GIF". */
export function formatNames(formats: readonly ImageFormat[] = IMAGE_FORMATS): string {
  const names = formats.map((f) => FORMATS[f].name);
  return names.length < 2 ? names.join('') : `${names.slice(0, -1).join(', ')} or ${names.at(-1)}`;
}

/** The formats a class of dimension limits applies to. */
export const formatsLimitedBy = (limits: LimitClass): ImageFormat[] =>
  IMAGE_FORMATS.filter((f) => FORMATS[f].limits === limits);
