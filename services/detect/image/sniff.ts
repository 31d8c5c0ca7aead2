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
import type { ImageFormat } from './types.ts';

/** file-type MIME types that are whitelisted formats. */
const WHITELISTED_MIME: Record<string, ImageFormat> = {
  'image/jpeg': 'jpeg',
  'image/png': 'png',
  'image/apng': 'png', // animated PNG: decoded as its default image (the first frame)
  'image/webp': 'webp',
  'image/bmp': 'bmp',
  'image/tiff': 'tiff',
  'image/gif': 'gif',
};

/** BITMAPCOREHEADER, OS/2 v2 short, INFO, V2, V3, OS/2 v2, V4, V5. */
const BMP_DIB_HEADER_SIZES = new Set([12, 16, 40, 52, 56, 64, 108, 124]);

function startsWith(bytes: Uint8Array, prefix: readonly number[], offset = 0): boolean {
  if (bytes.length < offset + prefix.length) return false;
  for (let i = 0; i < prefix.length; i++) if (bytes[offset + i] !== prefix[i]) return false;
  return true;
}

const ascii = (s: string): number[] => Array.from(s, (c) => c.charCodeAt(0));

/**
 * Our own signature check: stricter than file-type where file-type is loose (BMP is only "BM" there,
 * GIF only "GIF"), and still positive where file-type gives up on a damaged but whitelisted file.
 */
export function signatureFormat(bytes: Uint8Array): ImageFormat | undefined {
  if (startsWith(bytes, [0xff, 0xd8, 0xff])) return 'jpeg';
  if (startsWith(bytes, [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a])) return 'png';
  if (startsWith(bytes, ascii('GIF87a')) || startsWith(bytes, ascii('GIF89a'))) return 'gif';
  if (startsWith(bytes, ascii('RIFF')) && startsWith(bytes, ascii('WEBP'), 8)) return 'webp';
  // Classic TIFF (42) and BigTIFF (43), both byte orders.
  if (
    startsWith(bytes, [0x49, 0x49, 0x2a, 0x00]) ||
    startsWith(bytes, [0x4d, 0x4d, 0x00, 0x2a]) ||
    startsWith(bytes, [0x49, 0x49, 0x2b, 0x00]) ||
    startsWith(bytes, [0x4d, 0x4d, 0x00, 0x2b])
  ) {
    return 'tiff';
  }
  // "BM" alone matches plenty of text; require a known DIB header size as well.
  if (startsWith(bytes, [0x42, 0x4d]) && bytes.length >= 18) {
    const dibSize = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength).getUint32(14, true);
    if (BMP_DIB_HEADER_SIZES.has(dibSize)) return 'bmp';
  }
  return undefined;
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
    const fromFileType = WHITELISTED_MIME[detectedMime];
    if (fromFileType === undefined) {
      throw new ApiError(
        'UNSUPPORTED_FORMAT',
        `Unsupported format (${detectedMime}): send JPEG, PNG, WebP, BMP, TIFF or GIF`,
      );
    }
    // Both must agree: file-type's BMP ("BM") and GIF ("GIF") checks are too loose on their own.
    if (own === fromFileType) return own;
    throw new ApiError('UNSUPPORTED_FORMAT', 'Unsupported format: no valid image signature');
  }
  if (own !== undefined) return own;
  throw new ApiError('UNSUPPORTED_FORMAT');
}

const MIME_TO_FORMAT: Record<string, ImageFormat> = {
  'image/jpeg': 'jpeg',
  'image/jpg': 'jpeg',
  'image/png': 'png',
  'image/webp': 'webp',
  'image/bmp': 'bmp',
  'image/x-ms-bmp': 'bmp',
  'image/x-bmp': 'bmp',
  'image/tiff': 'tiff',
  'image/gif': 'gif',
};

/**
 * The whitelisted format a declared Content-Type names (case-insensitive, parameters ignored), or
 * undefined. Used only to refuse a declared type that contradicts the bytes (4001); never to decide
 * the format.
 */
export function formatFromMimeType(contentType: string): ImageFormat | undefined {
  const essence = contentType.split(';', 1)[0]?.trim().toLowerCase() ?? '';
  return Object.hasOwn(MIME_TO_FORMAT, essence) ? MIME_TO_FORMAT[essence] : undefined;
}
