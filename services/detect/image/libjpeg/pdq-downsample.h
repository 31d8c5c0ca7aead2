// Meta's PDQ downsample (luma, Jarosz filter, decimation to 64×64) fed one RGB row at a time, a large
// frame averaged over blocks first: pdq-downsample.c says how it stays bit for bit the reference's. The
// hash itself (quality, DCT, median) is computed from the 64×64 result by pdq.ts.

#ifndef PDQ_DOWNSAMPLE_H
#define PDQ_DOWNSAMPLE_H

#include <stdint.h>

#define PDQ_SIDE 64
// The largest block side (pdq.ts's PDQ_MAX_BLOCK): a column's sum over a block's rows fits 16 bits.
#define PDQ_MAX_BLOCK 257

typedef struct PdqRows PdqRows;

// NULL when out of memory. A frame of any size >= 1 on each side. reduce_side > 0: a side of at least
// twice reduce_side is first averaged over blocks of ⌊side / reduce_side⌋ pixels (pdq.ts says why); 0:
// the filter reads the frame itself. Under 5 pixels a side PDQ hashes to zeros (the caller's business),
// and rows pushed are then only counted.
PdqRows *pdq_rows_new(int width, int height, int reduce_side);

// The first frame row the hash still needs (the frame's height once it needs none): the rows between
// may be skipped.
int pdq_rows_next_row(const PdqRows *p);

// Frame row y, interleaved 8-bit RGB (width × 3 bytes); rows come top to bottom, and those the hash
// does not read are ignored.
void pdq_rows_push_rgb(PdqRows *p, int y, const uint8_t *rgb);

// After the last row: the 64×64 downsample, row-major, into out. Returns 0 when a row it needed was not
// pushed.
int pdq_rows_finish(PdqRows *p, float out[PDQ_SIDE * PDQ_SIDE]);

void pdq_rows_free(PdqRows *p);

#endif
