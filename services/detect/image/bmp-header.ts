// The BMP headers as both the header probe (probe-bmp.ts) and the decoder (bmp.ts) read them: the
// signature, the DIB header sizes there are, and where each keeps the image's size. Each reader keeps
// its own bounds checks and messages.

/** The file header's signature, 'BM'. */
export const isBmpSignature = (b0: number, b1: number): boolean => b0 === 0x42 && b1 === 0x4d;

/** Where the DIB header starts (after the 14-byte file header), with its own size first. */
export const DIB_HEADER_OFFSET = 14;
/** BITMAPCOREHEADER: 16-bit width and height. */
export const CORE_HEADER_SIZE = 12;
/** OS/2 2.x headers. */
export const OS2_HEADER_SIZES: readonly number[] = [16, 64];
/** BITMAPINFOHEADER and its versions V2, V3, V4 and V5. */
export const INFO_HEADER_SIZES: readonly number[] = [40, 52, 56, 108, 124];

/** The height no image can have: its absolute value does not fit a signed 32-bit field. */
export const HEIGHT_OUT_OF_RANGE = -0x80000000;

interface LittleEndianReads {
  u16le(offset: number): number;
  i32le(offset: number): number;
}

/**
 * The width and the stored height (negative: rows top-down) of a DIB header of a known size:
 * 16-bit fields in a BITMAPCOREHEADER, signed 32-bit ones in every other.
 */
export function bmpSize(r: LittleEndianReads, dibSize: number): { width: number; rawHeight: number } {
  const at = DIB_HEADER_OFFSET + 4;
  return dibSize === CORE_HEADER_SIZE
    ? { width: r.u16le(at), rawHeight: r.u16le(at + 2) }
    : { width: r.i32le(at), rawHeight: r.i32le(at + 4) };
}
