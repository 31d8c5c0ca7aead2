// Meta's PDQ downsample (luma, Jarosz filter, decimation to 64×64) fed one RGB row at a time:
// pdq-downsample.c says how it stays bit for bit the reference's. The hash itself (quality, DCT,
// median) is computed from the 64×64 result by pdq.ts.

#ifndef PDQ_DOWNSAMPLE_H
#define PDQ_DOWNSAMPLE_H

#include <stdint.h>

#define PDQ_SIDE 64

typedef struct PdqRows PdqRows;

// NULL when out of memory. Any size >= 1 on each side; under 5 pixels a side PDQ hashes to zeros
// (the caller's business), and rows pushed are then only counted.
PdqRows *pdq_rows_new(int width, int height);

// One row of interleaved 8-bit RGB (width × 3 bytes), top to bottom.
void pdq_rows_push_rgb(PdqRows *p, const uint8_t *rgb);

// After the last row: the 64×64 downsample, row-major, into out. Returns 0 when not every row was pushed.
int pdq_rows_finish(PdqRows *p, float out[PDQ_SIDE * PDQ_SIDE]);

void pdq_rows_free(PdqRows *p);

#endif
