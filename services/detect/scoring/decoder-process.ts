// One decoder process (decoder-pool.ts): turns one image at a time into its model input, and nothing
// else — no ONNX session, no other image. Decoding is where an image's cost depends on what it is (a
// file built to cost minutes of CPU, or hundreds of MB, looks like any other upload), so it runs where
// a kill is safe: SIGKILL ends a process whatever native code it is in, and gives its memory back at
// once; a worker thread cannot be ended from inside libjpeg or libvips, and terminating one beside an
// ONNX session aborts the whole server.
//
// Messages over the IPC channel ('advanced' serialization: typed arrays cross as they are):
// {id, bytes, probed} in; {id, ok: true, tensor, decodeStartedAt, decodeMs} or
// {id, ok: false, code?, message} out. {ready: true} once sharp and the fast path have decoded one image.

import sharp from 'sharp';
import { isApiError } from '../../../lib/common/errors.ts';
import type { ModelChoice } from '../../../lib/common/model-catalogue.ts';
import type { JpegDecoder } from '../image/libjpeg/jpeg-tensor.ts';
import type { ImagePdq } from '../image/pdq.ts';
import type { DimensionLimits, ProbedImage } from '../image/types.ts';
import { decodeForModel, epochNow } from './image-scorer.ts';
import { releaseBuffer } from './release-buffer.ts';

export interface DecoderProcessData {
  model?: ModelChoice;
  inputSize: number;
  limits: DimensionLimits;
  jpegDecoder: JpegDecoder;
  /** Margins trimmed and long frames tiled, up to this many tiles (frame-layout.ts). */
  maxTiles: number;
  /** Frames of an animation scored, at most (image/frames.ts). */
  maxFramesScored: number;
  /** Also hash each decoded frame with PDQ (PDQ_HASHES). */
  pdq: boolean;
}

export interface DecodeRequest {
  id: number;
  bytes: Uint8Array;
  probed: ProbedImage;
  /** A heavy image (decoder-pool.ts): decoded on one libvips thread, so it takes one core, not all. */
  heavy?: boolean;
  /** This image's MAX_FRAMES_SCORED (the DetectionPolicy's, per request); unset: the process's. */
  maxFramesScored?: number;
  /** Hash this image with PDQ (PerImage.pdq); unset: the process's. */
  pdq?: boolean;
}

export type DecodeReply =
  | { id: number; ok: true; tensor: Float32Array; pdq?: ImagePdq; decodeStartedAt: number; decodeMs: number }
  | { id: number; ok: false; code?: number; message: string };

const send = process.send?.bind(process);
if (!send) throw new Error('decoder-process must run as a forked child with an IPC channel');
const data = JSON.parse(process.argv[2] ?? '') as DecoderProcessData;
const decode = {
  limits: data.limits,
  jpegDecoder: data.jpegDecoder,
  ...(data.model !== undefined && { model: data.model }),
  maxTiles: data.maxTiles,
  maxFramesScored: data.maxFramesScored,
  pdq: data.pdq,
};

// The parent going away (crash, SIGKILL) closes the channel: nothing is left to decode for.
process.on('disconnect', () => process.exit(0));

try {
  // One warm-up image before reporting ready: the first decode sets up libvips and the addon, which
  // would otherwise land on a caller.
  const warmUp = await sharp({ create: { width: 640, height: 480, channels: 3, background: '#808080' } })
    .jpeg()
    .toBuffer();
  await decodeForModel(
    warmUp,
    { format: 'jpeg', width: 640, height: 480, frames: 1 },
    data.inputSize,
    decode,
  );
  const threads = sharp.concurrency();
  process.on('message', async ({ id, bytes, probed, heavy, maxFramesScored, pdq: hash }: DecodeRequest) => {
    // One image at a time per process, so the setting is this image's.
    sharp.concurrency(heavy ? 1 : threads);
    const decodeStartedAt = epochNow();
    let reply: DecodeReply;
    try {
      const { tensor, pdq } = await decodeForModel(bytes, probed, data.inputSize, {
        ...decode,
        ...(maxFramesScored !== undefined && { maxFramesScored }),
        ...(hash !== undefined && { pdq: hash }),
      });
      reply = {
        id,
        ok: true,
        tensor,
        ...(pdq && { pdq }),
        decodeStartedAt,
        decodeMs: epochNow() - decodeStartedAt,
      };
    } catch (err) {
      const message = err instanceof Error ? err.message : String(err);
      reply = { id, ok: false, code: isApiError(err) ? err.code : undefined, message };
    }
    send(reply);
    // Both were copied into the message (or never made): free them now rather than at the next
    // collection, which a process this small may not run for hundreds of images.
    releaseBuffer(bytes);
    if (reply.ok) releaseBuffer(reply.tensor);
  });
  send({ ready: true });
} catch (err) {
  send({ fatal: err instanceof Error ? err.message : String(err) });
}
