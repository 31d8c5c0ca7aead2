// Meta's PDQ downsample (ThreatExchange pdq/cpp/hashing/pdqhashing.cpp and downscaling/downscaling.cpp,
// as pdqhash 0.2.8 runs them), streamed: RGB rows go in one at a time and only a window of rows is held,
// so the JPEG fast path hashes the rows it decodes without a full-size image.
//
//   luma = float(0.299 R + 0.587 G + 0.114 B)   in doubles first: pdqhash computes it with numpy
//   Jarosz filter: box along rows, box along columns, twice (float running sums), window ⌈dim / 128⌉
//   decimate to 64×64 (pixel centres)
//
// Bit for bit the reference: every float operation is the reference's, on the same operands in the same
// order (built with -ffp-contract=off: no fused multiply-adds). Rows are boxed eight at a time only so
// that eight independent running sums keep the processor busy; each row's arithmetic is unchanged. The
// second pass down the columns runs on the 64 sampled columns alone: no other output of it is used.
// pdq.ts holds the same filter in TypeScript, for where this addon is not built; pdq-parity.test.ts
// holds both to the reference.
//
// A frame with a side of twice the reduce side or more is first averaged over blocks of kx × ky pixels
// (k = ⌊side / reduce side⌋ on each axis; pdq.ts says why): 8-bit RGB again, each the block's sum
// rounded half up, the right and bottom remainders dropped (k at most PDQ_MAX_BLOCK). The filter then
// reads at most 1023 pixels a side, short of sides over 131,000 pixels.

#include "pdq-downsample.h"

#include <stdlib.h>
#include <string.h>

#define MIN_HASHABLE_DIM 5
#define BATCH 8

static double R299[256], G587[256], B114[256]; // v * 0.299 etc. in doubles: numpy's products

__attribute__((constructor)) static void luma_init(void) {
  for (int v = 0; v < 256; v++) {
    R299[v] = (double)v * 0.299;
    G587[v] = (double)v * 0.587;
    B114[v] = (double)v * 0.114;
  }
}

// downscaling.cpp computeJaroszFilterWindowSize.
static int jarosz_window(int dimension) { return (dimension + 2 * PDQ_SIDE - 1) / (2 * PDQ_SIDE); }

// box1DFloat with stride 1 over BATCH rows at once, interleaved: value i of row k at [i * BATCH + k], in
// and out. Each row keeps its own running sum (one lane each), so the eight rows' additions, subtractions
// and divisions are single vector instructions; rows past `rows` are boxed too but never used.
static void box_rows(const float *restrict in, float *restrict out, int n, int window) {
  int half = (window + 2) / 2;
  float sum[BATCH] = {0};
  int count = 0, ri = 0, li = 0, oi = 0;
  for (int i = 0; i < half - 1; i++, ri++) {
    for (int k = 0; k < BATCH; k++) sum[k] = sum[k] + in[ri * BATCH + k];
    count++;
  }
  for (int i = 0; i < window - half + 1; i++, ri++, oi++) {
    count++;
    for (int k = 0; k < BATCH; k++) {
      sum[k] = sum[k] + in[ri * BATCH + k];
      out[oi * BATCH + k] = sum[k] / (float)count;
    }
  }
  float full = (float)count;
  for (int i = 0; i < n - window; i++, ri++, li++, oi++) {
    for (int k = 0; k < BATCH; k++) {
      sum[k] = sum[k] + in[ri * BATCH + k];
      sum[k] = sum[k] - in[li * BATCH + k];
      out[oi * BATCH + k] = sum[k] / full;
    }
  }
  for (int i = 0; i < half - 1; i++, li++, oi++) {
    count--;
    for (int k = 0; k < BATCH; k++) {
      sum[k] = sum[k] - in[li * BATCH + k];
      out[oi * BATCH + k] = sum[k] / (float)count;
    }
  }
}

// Row k of an interleaved batch, as a plain row.
static void deinterleave(const float *restrict batch, int k, int n, float *restrict row) {
  for (int i = 0; i < n; i++) row[i] = batch[i * BATCH + k];
}

// box1DFloat down the columns (stride = width), fed a row at a time: output row oi leaves as soon as it
// is known. Holds the last `window` rows (to subtract them) and the running sums.
typedef struct {
  int width, height, window, half, rows, count;
  float *sums, *ring, *out;
} ColumnBox;

static int column_box_init(ColumnBox *c, int width, int height, int window) {
  c->width = width;
  c->height = height;
  c->window = window;
  c->half = (window + 2) / 2;
  c->rows = 0;
  c->count = 0;
  c->sums = calloc((size_t)width, sizeof(float));
  c->ring = calloc((size_t)width * (size_t)window, sizeof(float));
  c->out = calloc((size_t)width, sizeof(float));
  return c->sums && c->ring && c->out;
}

static void column_box_free(ColumnBox *c) {
  free(c->sums);
  free(c->ring);
  free(c->out);
}

// Adds a row; returns the output row index it completes (its values in c->out), or -1. `wanted` says
// whether that output row is used at all (NULL: every row).
static int column_box_push(ColumnBox *c, const float *restrict row, const uint8_t *wanted) {
  int ri = c->rows++;
  int w = c->width;
  float *restrict sums = c->sums;
  float *restrict out = c->out;
  float *restrict slot = c->ring + (size_t)(ri % c->window) * w;
  int oi = ri - (c->half - 1);
  int emit = oi >= 0 && (!wanted || wanted[oi]);
  if (ri < c->window) {
    // Phases 1 and 2: the window grows.
    float count = (float)++c->count;
    for (int j = 0; j < w; j++) {
      float v = row[j];
      sums[j] = sums[j] + v;
      slot[j] = v;
    }
    if (emit)
      for (int j = 0; j < w; j++) out[j] = sums[j] / count;
  } else {
    // Phase 3: add the new row, then subtract the one `window` rows above it, whose ring slot it takes.
    float count = (float)c->count;
    for (int j = 0; j < w; j++) {
      float v = row[j];
      sums[j] = (sums[j] + v) - slot[j];
      slot[j] = v;
    }
    if (emit)
      for (int j = 0; j < w; j++) out[j] = sums[j] / count;
  }
  return emit ? oi : -1;
}

// Phase 4, after the last row: the window shrinks. Calls back for each wanted output row.
typedef void (*RowSink)(void *context, const float *row, int oi);

static void column_box_finish(ColumnBox *c, const uint8_t *wanted, RowSink sink, void *context) {
  int w = c->width;
  int li = c->height - c->window;
  for (int oi = c->height - c->half + 1; oi < c->height; oi++, li++) {
    const float *slot = c->ring + (size_t)(li % c->window) * w;
    for (int j = 0; j < w; j++) c->sums[j] = c->sums[j] - slot[j];
    c->count--;
    if (wanted && !wanted[oi]) continue;
    float count = (float)c->count;
    for (int j = 0; j < w; j++) c->out[j] = c->sums[j] / count;
    sink(context, c->out, oi);
  }
}

// A box pass along rows, fed a row at a time and run on batches of rows (interleaved, box_rows).
typedef struct {
  int pending;
  float *in, *out, *row; // in and out: BATCH interleaved rows; row: one plain row
} RowBoxes;

static int row_boxes_init(RowBoxes *r, int width) {
  r->pending = 0;
  r->in = malloc(sizeof(float) * (size_t)width * (2 * BATCH + 1));
  if (!r->in) return 0;
  r->out = r->in + (size_t)width * BATCH;
  r->row = r->out + (size_t)width * BATCH;
  return 1;
}

static void row_boxes_free(RowBoxes *r) { free(r->in); }

struct PdqRows {
  int frame_height;    // the frame's; width and height below are what the filter reads
  int kx, ky;          // the blocks averaged (1 × 1: the frame itself)
  int frame_rows;      // frame rows taken so far
  int failed;          // a frame row went by unpushed
  uint16_t *column_sums; // frame width × 3: each column's sum over the block rows so far (ky > 1;
                         // 16 bits: at most PDQ_MAX_BLOCK rows of 255)
  uint8_t *averages;     // 255 × kx × ky + 1: a block's sum -> its average, rounded half up
  uint8_t *reduced;      // width × 3: one row of block averages (NULL: the filter reads the frame)
  int width, height, window_along_rows, rows, direct, tiny;
  int cols[PDQ_SIDE];  // decimateFloat's source column of each output column
  uint8_t *wanted;     // height flags: output rows of the second column pass that are sampled
  int *first_of;       // height: the first 64×64 row sampling output row oi
  RowBoxes rows1, rows2;
  ColumnBox first, second;
  float picked[PDQ_SIDE];
  float buffer64[PDQ_SIDE * PDQ_SIDE];
};

// decimateFloat's "target centers not corners": output i samples input trunc((i + 0.5) * n / 64).
static int sampled(int i, int n) { return (int)(((double)i + 0.5) * n / PDQ_SIDE); }

static void to_buffer(void *context, const float *row, int oi) {
  PdqRows *p = context;
  for (int i = p->first_of[oi]; i < PDQ_SIDE && sampled(i, p->height) == oi; i++)
    memcpy(p->buffer64 + i * PDQ_SIDE, row, sizeof(float) * PDQ_SIDE);
}

// Rows leaving the second box pass along rows: their 64 sampled columns go down the second column pass.
static void rows2_done(PdqRows *p, int count) {
  for (int k = 0; k < count; k++) {
    for (int j = 0; j < PDQ_SIDE; j++) p->picked[j] = p->rows2.out[p->cols[j] * BATCH + k];
    int oi = column_box_push(&p->second, p->picked, p->wanted);
    if (oi >= 0) to_buffer(p, p->second.out, oi);
  }
}

static void rows2_push(void *context, const float *row, int oi) {
  (void)oi;
  PdqRows *p = context;
  float *restrict in = p->rows2.in;
  int k = p->rows2.pending++;
  for (int i = 0; i < p->width; i++) in[i * BATCH + k] = row[i];
  if (p->rows2.pending == BATCH) {
    box_rows(p->rows2.in, p->rows2.out, p->width, p->window_along_rows);
    p->rows2.pending = 0;
    rows2_done(p, BATCH);
  }
}

static void rows1_done(PdqRows *p, int count) {
  for (int k = 0; k < count; k++) {
    deinterleave(p->rows1.out, k, p->width, p->rows1.row);
    int oi = column_box_push(&p->first, p->rows1.row, NULL);
    if (oi >= 0) rows2_push(p, p->first.out, oi);
  }
}

// pdq.ts's pdqBlocks: a block's side along a frame side.
static int block_side(int side, int reduce_side) {
  if (reduce_side <= 0 || side < 2 * reduce_side) return 1;
  return side / reduce_side < PDQ_MAX_BLOCK ? side / reduce_side : PDQ_MAX_BLOCK;
}

PdqRows *pdq_rows_new(int frame_width, int frame_height, int reduce_side) {
  PdqRows *p = calloc(1, sizeof(PdqRows));
  if (!p) return NULL;
  p->frame_height = frame_height;
  p->kx = block_side(frame_width, reduce_side);
  p->ky = block_side(frame_height, reduce_side);
  int width = frame_width / p->kx;
  int height = frame_height / p->ky;
  p->width = width;
  p->height = height;
  if (p->kx * p->ky > 1) {
    uint32_t n = (uint32_t)(p->kx * p->ky);
    if ((p->ky > 1 && !(p->column_sums = calloc((size_t)frame_width * 3, sizeof(uint16_t)))) ||
        !(p->averages = malloc((size_t)255 * n + 1)) || !(p->reduced = malloc((size_t)width * 3)))
      goto oom;
    // A table, not a division per channel: blocks of one frame row (ky = 1) would divide ~1.5 M times
    // a megapixel.
    for (uint32_t sum = 0; sum <= 255 * n; sum++) p->averages[sum] = (uint8_t)((sum + n / 2) / n);
  }
  p->direct = width == PDQ_SIDE && height == PDQ_SIDE;
  p->tiny = width < MIN_HASHABLE_DIM || height < MIN_HASHABLE_DIM;
  p->window_along_rows = jarosz_window(width);
  for (int j = 0; j < PDQ_SIDE; j++) p->cols[j] = sampled(j, width);
  if (p->tiny || p->direct) return p; // nothing to filter
  if (!row_boxes_init(&p->rows1, width)) goto oom;
  int window_along_cols = jarosz_window(height);
  p->wanted = calloc((size_t)height, 1);
  p->first_of = calloc((size_t)height, sizeof(int));
  if (!p->wanted || !p->first_of || !row_boxes_init(&p->rows2, width) ||
      !column_box_init(&p->first, width, height, window_along_cols) ||
      !column_box_init(&p->second, PDQ_SIDE, height, window_along_cols))
    goto oom;
  for (int i = PDQ_SIDE - 1; i >= 0; i--) {
    int r = sampled(i, height);
    p->wanted[r] = 1;
    p->first_of[r] = i;
  }
  return p;
oom:
  pdq_rows_free(p);
  return NULL;
}

// pdqhash's luma of one pixel: numpy's products in doubles, added left to right, stored as a float.
static inline float luma_of(const uint8_t *px) { return (float)(R299[px[0]] + G587[px[1]] + B114[px[2]]); }

// The next row the filter reads (width × 3 bytes of RGB).
static void filter_push(PdqRows *p, const uint8_t *rgb) {
  int row = p->rows++;
  if (p->tiny) return;
  if (p->direct) {
    for (int j = 0; j < PDQ_SIDE; j++) p->buffer64[row * PDQ_SIDE + j] = luma_of(rgb + (size_t)j * 3);
    return;
  }
  float *restrict luma = p->rows1.in + p->rows1.pending;
  for (int j = 0; j < p->width; j++) luma[j * BATCH] = luma_of(rgb + (size_t)j * 3);
  if (++p->rows1.pending == BATCH) {
    box_rows(p->rows1.in, p->rows1.out, p->width, p->window_along_rows);
    p->rows1.pending = 0;
    rows1_done(p, BATCH);
  }
}

int pdq_rows_next_row(const PdqRows *p) {
  // Every row of the blocks; none of the bottom remainder.
  return p->frame_rows < p->height * p->ky ? p->frame_rows : p->frame_height;
}

// The blocks' sums across kx columns of `sums` (each column's sum over the block rows, or the frame row
// itself when blocks are one row high), averaged, into `out`. Inlined with kx a constant for the common
// block widths, so the loop over a block is unrolled.
#define AVERAGE_BLOCKS(name, T)                                                                            \
  static inline __attribute__((always_inline)) void name(const PdqRows *p, const T *restrict sums,         \
                                                         uint8_t *restrict out, int kx) {                  \
    const uint8_t *restrict averages = p->averages;                                                        \
    for (int x = 0; x < p->width; x++, out += 3, sums += 3 * kx) {                                         \
      uint32_t r = 0, g = 0, b = 0;                                                                        \
      for (int dx = 0; dx < kx; dx++) {                                                                    \
        r += sums[dx * 3];                                                                                 \
        g += sums[dx * 3 + 1];                                                                             \
        b += sums[dx * 3 + 2];                                                                             \
      }                                                                                                    \
      out[0] = averages[r];                                                                                \
      out[1] = averages[g];                                                                                \
      out[2] = averages[b];                                                                                \
    }                                                                                                      \
  }
AVERAGE_BLOCKS(average_sums, uint16_t)
AVERAGE_BLOCKS(average_row, uint8_t)

#define BY_WIDTH(average, p, in)                                                                           \
  switch ((p)->kx) {                                                                                       \
  case 2: average(p, in, (p)->reduced, 2); break;                                                          \
  case 3: average(p, in, (p)->reduced, 3); break;                                                          \
  case 4: average(p, in, (p)->reduced, 4); break;                                                          \
  default: average(p, in, (p)->reduced, (p)->kx); break;                                                   \
  }

// A frame row into its blocks: with blocks one row high, averaged at once; else added to its columns'
// sums (one vector add a few bytes wide), averaged after the block row's last frame row. The averages
// go to the filter.
static void block_push(PdqRows *p, const uint8_t *restrict rgb) {
  if (p->ky == 1) {
    BY_WIDTH(average_row, p, rgb)
  } else {
    uint16_t *restrict sums = p->column_sums;
    int n = p->width * p->kx * 3; // the columns of whole blocks
    for (int i = 0; i < n; i++) sums[i] += rgb[i];
    if (p->frame_rows % p->ky) return;
    if (p->kx == 1) average_sums(p, sums, p->reduced, 1);
    else BY_WIDTH(average_sums, p, sums)
    memset(sums, 0, sizeof(uint16_t) * (size_t)n);
  }
  filter_push(p, p->reduced);
}

void pdq_rows_push_rgb(PdqRows *p, int y, const uint8_t *rgb) {
  if (y != p->frame_rows) {
    if (y > p->frame_rows && p->frame_rows < p->height * p->ky) p->failed = 1;
    return;
  }
  if (p->frame_rows >= p->height * p->ky) return;
  p->frame_rows++;
  if (p->reduced) block_push(p, rgb);
  else filter_push(p, rgb);
}

int pdq_rows_finish(PdqRows *p, float out[PDQ_SIDE * PDQ_SIDE]) {
  if (p->failed || p->rows != p->height) return 0;
  if (p->tiny) {
    memset(out, 0, sizeof(float) * PDQ_SIDE * PDQ_SIDE);
    return 1;
  }
  if (!p->direct) {
    int rest = p->rows1.pending;
    if (rest) box_rows(p->rows1.in, p->rows1.out, p->width, p->window_along_rows);
    p->rows1.pending = 0;
    rows1_done(p, rest);
    column_box_finish(&p->first, NULL, rows2_push, p);
    rest = p->rows2.pending;
    if (rest) box_rows(p->rows2.in, p->rows2.out, p->width, p->window_along_rows);
    p->rows2.pending = 0;
    rows2_done(p, rest);
    column_box_finish(&p->second, p->wanted, to_buffer, p);
  }
  memcpy(out, p->buffer64, sizeof p->buffer64);
  return 1;
}

void pdq_rows_free(PdqRows *p) {
  if (!p) return;
  row_boxes_free(&p->rows1);
  row_boxes_free(&p->rows2);
  column_box_free(&p->first);
  column_box_free(&p->second);
  free(p->wanted);
  free(p->first_of);
  free(p->column_sums);
  free(p->averages);
  free(p->reduced);
  free(p);
}
