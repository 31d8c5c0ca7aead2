// The BMP header's size (the header layout shared with the decoder: bmp-header.ts).

import {
  bmpSize,
  CORE_HEADER_SIZE,
  DIB_HEADER_OFFSET,
  HEIGHT_OUT_OF_RANGE,
  INFO_HEADER_SIZES,
  isBmpSignature,
  OS2_HEADER_SIZES,
} from './bmp-header.ts';
import type { Bytes, Dims } from './probe-bytes.ts';
import { HeaderError } from './probe-bytes.ts';

export function probeBmp(r: Bytes): Dims {
  r.need(0, 18, 'DIB header size');
  if (!isBmpSignature(r.u8(0), r.u8(1))) throw new HeaderError('missing BM signature');
  const dibSize = r.u32le(DIB_HEADER_OFFSET);
  if (dibSize === CORE_HEADER_SIZE) r.need(DIB_HEADER_OFFSET, 12, 'BITMAPCOREHEADER');
  else if (OS2_HEADER_SIZES.includes(dibSize) || INFO_HEADER_SIZES.includes(dibSize))
    r.need(DIB_HEADER_OFFSET, 16, 'BITMAPINFOHEADER');
  else throw new HeaderError(`unknown DIB header size ${dibSize}`);
  const { width, rawHeight } = bmpSize(r, dibSize);
  if (rawHeight === HEIGHT_OUT_OF_RANGE) throw new HeaderError('height out of range');
  const height = Math.abs(rawHeight); // negative height = top-down rows
  if (width <= 0 || height === 0) throw new HeaderError(`invalid dimensions (${width}x${height})`);
  return { width, height, frames: 1 };
}
