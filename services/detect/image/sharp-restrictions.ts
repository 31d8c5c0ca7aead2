// What sharp may do here, process-wide:
// - only the formats' own libvips loaders (BMP never reaches libvips as a file, only as raw pixels):
//   everything else (SVG, HEIF/AVIF, PDF, JP2, JXL, FITS, Magick, ...) is blocked as defence in depth
//   behind the sniffer;
// - no operation cache, so that no pixels outlive a request.
//
// The loader list is shared by every thread and set by two calls (block every loader, unblock ours): a
// thread decoding between them finds its loader blocked and a valid photo "unsupported" (4005). So it
// is set once, by the process's main thread, before any thread decodes (the scoring pool does so
// before it starts a worker); worker threads leave it alone. The cache limit is shared too, but sharp
// turns the cache back on whenever a thread loads it: every decode turns it off again (~2 µs).

import { isMainThread } from 'node:worker_threads';
import sharp from 'sharp';
import { formatRow, IMAGE_FORMATS } from '../../../lib/common/image-formats.ts';

const ALLOWED_LOADERS = IMAGE_FORMATS.map((f) => formatRow(f).decoder).filter((d) => d !== 'bmp.ts');

let loadersRestricted = false;

/**
 * Blocks every libvips loader but the formats' own, for the whole process, once, from its main thread.
 * True if this call did it (false in a worker thread, or done already).
 */
export function restrictSharpLoaders(): boolean {
  if (!isMainThread || loadersRestricted) return false;
  sharp.block({ operation: ['VipsForeignLoad'] });
  sharp.unblock({ operation: ALLOWED_LOADERS });
  loadersRestricted = true;
  return true;
}

/** Before each decode: the loaders restricted (main thread), the operation cache off. */
export function restrictSharp(): void {
  restrictSharpLoaders();
  sharp.cache(false);
}
