// The JPEG fast path's decoder (jpeg-decode.c), without Node-API: the addon (jpeg-tensor.c) and the
// libFuzzer target (test/fuzz/jpeg-decode.fuzz.c) both call it.

#ifndef JPEG_DECODE_H
#define JPEG_DECODE_H

#include <stddef.h>
#include <stdint.h>

// Room for the longest reason (a libjpeg message, JMSG_LENGTH_MAX, with its prefix).
#define JPEG_DECODE_REASON_MAX 256

// Decodes `bytes` into `out` (NHWC float32 [size, size, 3], size in 1..4096) and the image's size;
// with `pdq64` (else NULL), also PDQ's 64×64 downsample of the whole decoded image, a large one averaged
// over blocks first (`pdq_reduce_side`, pdq-downsample.h). Returns 1 when taken; 0 when declined, with
// why in `reason`.
int jpeg_decode_to_tensor(const uint8_t *bytes, size_t length, int size, double max_pixels, int max_scans,
                          float *out, float *pdq64, int pdq_reduce_side, int *width, int *height,
                          char reason[JPEG_DECODE_REASON_MAX]);

#endif
