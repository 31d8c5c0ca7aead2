// What detect reads of an upload before taking it, in order: its format from the bytes (4002), the
// declared type against it (4001), its header walked and probed (4005, 4004). One function, so that a
// body refused while it streams in (streamed-header.ts) gets exactly the answer the whole body gets.

import { ApiError } from '../../lib/common/errors.ts';
import { inSpan } from '../../lib/common/telemetry.ts';
import { probeHeader, walkHeader } from './image/probe.ts';
import { sniffFormat } from './image/sniff.ts';
import type { DimensionLimits, ImageFormat, ProbedImage } from './image/types.ts';
import type { Declared } from './intake.ts';

export async function readHeader(
  bytes: Uint8Array,
  declared: Declared,
  limits: DimensionLimits,
): Promise<{ format: ImageFormat; probed: ProbedImage }> {
  const format = await inSpan('sniff', { 'image.bytes': bytes.length }, async (span) => {
    const sniffed = await sniffFormat(bytes);
    span.setAttribute('image.format', sniffed);
    return sniffed;
  });
  if (declared.declaredUnsupported || (declared.declaredFormat && declared.declaredFormat !== format)) {
    const shown = declared.declaredUnsupported ?? `image/${declared.declaredFormat}`;
    throw new ApiError('BAD_REQUEST', `Content-Type ${shown} does not match the image, which is ${format}`);
  }
  const probed = await inSpan('probe', { 'image.format': format }, async (span) => {
    // The long walks run in slices first, so that no upload holds the event loop (health probes).
    await walkHeader(bytes, format);
    const header = probeHeader(bytes, format, limits);
    span.setAttributes({
      'image.width': header.width,
      'image.height': header.height,
      'image.frames': header.frames,
    });
    return header;
  });
  return { format, probed };
}
