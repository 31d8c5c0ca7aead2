// Format detection from content only (DESIGN.md, "format detection"): the file name and any declared
// Content-Type are never trusted. file-type reads the magic bytes; a second, stricter signature check
// of our own decides which whitelisted format the bytes claim to be.
//
// Outcome rules (DESIGN.md, "4002 vs 4005"):
// - file-type names a type outside the whitelist (SVG/XML, AVIF/HEIF, PDF, JP2, JPEG-LS, camera RAW
//   in a TIFF container, ...) → 4002, even when a whitelisted prefix is also present;
// - neither file-type nor our own signature check recognises a whitelisted format → 4002;
// - a whitelisted signature that file-type cannot follow further (e.g. a TIFF whose first-IFD offset
//   points past the end, a PNG whose IHDR is damaged) is still that format: the probe or the decoder
//   then answers 4005, because the bytes do claim to be a whitelisted image.
// sharp must never see bytes that did not pass this function.

import { fileTypeFromBuffer } from 'file-type';
import { ApiError } from '../../../lib/common/errors.ts';
import { FORMATS, formatNames, IMAGE_FORMATS, type ImageFormat } from '../../../lib/common/image-formats.ts';

/** A table of MIME types to formats, from each format's row. */
const byMime = (types: (f: ImageFormat) => readonly string[]): ReadonlyMap<string, ImageFormat> =>
  new Map(IMAGE_FORMATS.flatMap((f) => types(f).map((type) => [type, f] as const)));

/** file-type MIME types that are whitelisted formats. */
const SNIFFED_MIME = byMime((f) => FORMATS[f].sniffedAs);

/**
 * Our own signature check (each format's row): stricter than file-type where file-type is loose (BMP is
 * only "BM" there, GIF only "GIF"), and still positive where file-type gives up on a damaged but
 * whitelisted file.
 */
export function signatureFormat(bytes: Uint8Array): ImageFormat | undefined {
  return IMAGE_FORMATS.find((f) => FORMATS[f].signature(bytes));
}

/** The whitelisted format of `bytes`, from content only; anything else → ApiError 4002. */
export async function sniffFormat(bytes: Uint8Array): Promise<ImageFormat> {
  let detectedMime: string | undefined;
  try {
    detectedMime = (await fileTypeFromBuffer(bytes))?.mime;
  } catch {
    // file-type should not throw on arbitrary bytes; if it ever does, fall back to our own check.
    detectedMime = undefined;
  }
  const own = signatureFormat(bytes);

  if (detectedMime !== undefined) {
    const fromFileType = SNIFFED_MIME.get(detectedMime);
    if (fromFileType === undefined) {
      throw new ApiError('UNSUPPORTED_FORMAT', `Unsupported format (${detectedMime}): send ${formatNames()}`);
    }
    // Both must agree: file-type's BMP ("BM") and GIF ("GIF") checks are too loose on their own.
    if (own === fromFileType) return own;
    throw new ApiError('UNSUPPORTED_FORMAT', 'Unsupported format: no valid image signature');
  }
  if (own !== undefined) return own;
  throw new ApiError('UNSUPPORTED_FORMAT');
}

/** Declared Content-Types that name a format: its own and the aliases clients send. */
const DECLARED_MIME = byMime((f) => [FORMATS[f].mime, ...FORMATS[f].mimeAliases]);

/**
 * The whitelisted format a declared Content-Type names (case-insensitive, parameters ignored), or
 * undefined. Used only to refuse a declared type that contradicts the bytes (4001); never to decide
 * the format.
 */
export function formatFromMimeType(contentType: string): ImageFormat | undefined {
  const essence = contentType.split(';', 1)[0]?.trim().toLowerCase() ?? '';
  return DECLARED_MIME.get(essence);
}
