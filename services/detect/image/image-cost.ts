// The bounds on what one image may cost to decode, checked from its header before any pixel is
// decoded (probe.ts) and by the fast path (libjpeg/jpeg-tensor.ts). docs/image-cost.md states them with
// the CPU time and memory they allow. (Plain TypeScript: the fast path's child processes load it with
// Node's type stripping.)

/**
 * More scans than any encoder writes: libjpeg's progressive default writes 10 (YCbCr) or 6 (grey), 18
 * for CMYK (2 + 4 a component); mozjpeg's scan search picks from 64 candidates; jpegtran's scan
 * scripts stop at 100. Each scan is a pass over every block of its components, so a script of one
 * coefficient per scan and every refinement (883 scans grey, 2,647 colour) multiplies the decode time.
 */
export const MAX_JPEG_SCANS = 100;

/**
 * The most 8×8 blocks the scans of one JPEG may walk together: 2^27, i.e. 43 passes over one component
 * of the largest allowed image (200 MP: 3.1 M blocks). The largest CMYK progressive JPEG libjpeg writes
 * (18 scans, 24 component passes) walks 75 M; a 10-scan 4:4:4 colour one 37.5 M. docs/image-cost.md
 * gives what a block costs (CPU) and so the bound per image.
 */
export const MAX_JPEG_SCAN_BLOCKS = 2 ** 27;
