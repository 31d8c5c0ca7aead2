// The JPEG fast path of the detect pipeline: libjpeg-turbo decodes a plain JPEG row by row and the
// nsfwjs resize (tf.image.resizeBilinear(x / 255, [size, size], alignCorners = true), decode.ts's
// resizeToTensor) samples the rows as they arrive, so the model input is made without a full-size RGB
// image, without libvips's pipeline threads, and without a JavaScript pass over the pixels.
//
// Measured on the 2-core bench box (bench/images.ts, ~1 MP): sharp's decode to raw RGB ~6.5-8 ms of CPU
// per image, of which libjpeg itself is ~3 ms (the rest: libvips worker hand-offs, page faults of a
// fresh 3 MB buffer, copies, GC of the Buffer); this path ~3.3 ms with the resize, ~3.1 ms since it
// skips the rows the resize does not sample (with PDQ, which reads every row, it skips none).
//
// Only images whose pixels sharp would hand over unchanged are taken: 8-bit YCbCr or greyscale, no
// embedded ICC profile (sharp would colour-manage it), EXIF orientation absent or 1 (sharp would rotate),
// at most `maxScans` progressive scans, every bit of every coefficient present (see
// coefficients_incomplete). Anything else, and every libjpeg warning or error, is declined
// with a reason and the caller decodes with sharp: its failOn rules, messages and timeouts stay
// the only ones. The output is bit-identical to sharp + resizeToTensor (test: jpeg-tensor.test.ts):
// libjpeg's defaults (islow IDCT, fancy upsampling) are libvips's, and the resize is the same double
// arithmetic in the same order (built with -ffp-contract=off: no fused multiply-adds).
//
// API: jpeg-decode.h (any thread; no global state but a table filled at load). The Node-API binding is
// jpeg-tensor.c.

#include "jpeg-decode.h"
#include "pdq-downsample.h"

#include <math.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// For cinfo->upsample->need_context_rows (below): the field libjpeg-turbo's own skipping branches on.
#define JPEG_INTERNALS
#include <jpeglib.h>

// ---------------------------------------------------------------------------------------------------
// libjpeg error handling: errors and warnings both end the decode (longjmp); the reason is kept.

typedef struct {
  struct jpeg_error_mgr pub;
  jmp_buf jump;
  char reason[JMSG_LENGTH_MAX + 32];
} Failure;

static void on_error_exit(j_common_ptr cinfo) {
  Failure *failure = (Failure *)cinfo->err;
  char message[JMSG_LENGTH_MAX];
  (*cinfo->err->format_message)(cinfo, message);
  snprintf(failure->reason, sizeof failure->reason, "libjpeg error: %s", message);
  longjmp(failure->jump, 1);
}

// Level -1 is a warning (corrupt or truncated data): sharp's failOn rules decide about those.
static void on_emit_message(j_common_ptr cinfo, int level) {
  if (level >= 0) return;
  Failure *failure = (Failure *)cinfo->err;
  char message[JMSG_LENGTH_MAX];
  (*cinfo->err->format_message)(cinfo, message);
  snprintf(failure->reason, sizeof failure->reason, "libjpeg warning: %s", message);
  longjmp(failure->jump, 1);
}

typedef struct {
  struct jpeg_progress_mgr pub;
  int max_scans;
} ScanLimit;

// A progressive JPEG with thousands of tiny scans costs a full pass over the coefficients per scan.
static void on_progress(j_common_ptr cinfo) {
  j_decompress_ptr d = (j_decompress_ptr)cinfo;
  ScanLimit *limit = (ScanLimit *)cinfo->progress;
  if (d->input_scan_number > limit->max_scans) {
    Failure *failure = (Failure *)cinfo->err;
    snprintf(failure->reason, sizeof failure->reason, "more than %d scans", limit->max_scans);
    longjmp(failure->jump, 1);
  }
}

// ---------------------------------------------------------------------------------------------------
// EXIF orientation, as libexif finds it for libvips (the first of IFD0, IFD1, Exif, GPS, Interop that
// has the tag): collect every orientation tag of those IFDs; the fast path takes the image only if
// each is 1. Anything unreadable declines (sharp then reads the EXIF itself).

enum { EXIF_OK = 0, EXIF_ROTATED = 1, EXIF_UNREADABLE = 2 };

typedef struct {
  const uint8_t *tiff;
  size_t length;
  int little_endian;
} Tiff;

static uint32_t tiff_u16(const Tiff *t, size_t at) {
  const uint8_t *p = t->tiff + at;
  return t->little_endian ? (uint32_t)p[0] | (uint32_t)p[1] << 8 : (uint32_t)p[0] << 8 | p[1];
}

static uint32_t tiff_u32(const Tiff *t, size_t at) {
  const uint8_t *p = t->tiff + at;
  return t->little_endian
             ? (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24
             : (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

// Checks one IFD; returns its next-IFD offset through *next (0: none) and sub-IFD offsets.
static int exif_ifd(const Tiff *t, uint32_t offset, uint32_t *next, uint32_t *exif, uint32_t *gps,
                    uint32_t *interop) {
  if (offset < 8 || (size_t)offset + 2 > t->length) return EXIF_UNREADABLE;
  uint32_t count = tiff_u16(t, offset);
  size_t end = (size_t)offset + 2 + (size_t)count * 12;
  if (end + 4 > t->length) return EXIF_UNREADABLE;
  int result = EXIF_OK;
  for (uint32_t i = 0; i < count; i++) {
    size_t entry = (size_t)offset + 2 + (size_t)i * 12;
    uint32_t tag = tiff_u16(t, entry);
    uint32_t type = tiff_u16(t, entry + 2);
    uint32_t n = tiff_u32(t, entry + 4);
    if (tag == 0x0112) {
      if (type != 3 || n != 1) return EXIF_UNREADABLE;
      if (tiff_u16(t, entry + 8) != 1) result = EXIF_ROTATED;
    } else if ((tag == 0x8769 || tag == 0x8825 || tag == 0xA005) && n == 1 && (type == 4 || type == 13)) {
      uint32_t *target = tag == 0x8769 ? exif : tag == 0x8825 ? gps : interop;
      if (target) *target = tiff_u32(t, entry + 8);
    }
  }
  if (next) *next = tiff_u32(t, end);
  return result;
}

static int exif_orientation(const uint8_t *data, size_t length) {
  static const uint8_t EXIF[6] = {'E', 'x', 'i', 'f', 0, 0};
  if (length < 6 || memcmp(data, EXIF, 6) != 0) return EXIF_OK; // XMP and other APP1 payloads
  Tiff t = {data + 6, length - 6, 0};
  if (t.length < 8) return EXIF_UNREADABLE;
  if (t.tiff[0] == 'I' && t.tiff[1] == 'I') t.little_endian = 1;
  else if (!(t.tiff[0] == 'M' && t.tiff[1] == 'M')) return EXIF_UNREADABLE;
  if (tiff_u16(&t, 2) != 42) return EXIF_UNREADABLE;

  uint32_t ifd1 = 0, exif = 0, gps = 0, interop = 0;
  int worst = exif_ifd(&t, tiff_u32(&t, 4), &ifd1, &exif, &gps, NULL);
  if (worst == EXIF_UNREADABLE) return worst;
  uint32_t more[3] = {ifd1, gps, 0};
  if (exif) {
    int r = exif_ifd(&t, exif, NULL, NULL, NULL, &interop);
    if (r == EXIF_UNREADABLE) return r;
    if (r > worst) worst = r;
  }
  more[2] = interop;
  for (int i = 0; i < 3; i++) {
    if (!more[i]) continue;
    int r = exif_ifd(&t, more[i], NULL, NULL, NULL, NULL);
    if (r == EXIF_UNREADABLE) return r;
    if (r > worst) worst = r;
  }
  return worst;
}

// ---------------------------------------------------------------------------------------------------
// The resize: decode.ts's resizeToTensor, statement for statement.

static double UNIT[256]; // Math.fround(v / 255), held as doubles

// Filled once when the library is loaded (before any thread can call in), not per Node-API environment.
__attribute__((constructor)) static void unit_init(void) {
  for (int v = 0; v < 256; v++) UNIT[v] = (double)(float)((double)v / 255.0);
}

typedef struct {
  int size, width, height;
  double row_ratio, col_ratio;
  int32_t *col_left, *col_right; // byte offsets in an RGB row
  double *col_frac;
  float *out;
} Resize;

static void resize_row(const Resize *z, int r, const uint8_t *top, const uint8_t *bottom, double row_frac) {
  float *out = z->out + (size_t)r * z->size * 3;
  for (int c = 0; c < z->size; c++) {
    int left = z->col_left[c], right = z->col_right[c];
    double cf = z->col_frac[c];
    for (int k = 0; k < 3; k++) {
      double tl = UNIT[top[left + k]], tr = UNIT[top[right + k]];
      double bl = UNIT[bottom[left + k]], br = UNIT[bottom[right + k]];
      double t = tl + (tr - tl) * cf;
      double b = bl + (br - bl) * cf;
      out[c * 3 + k] = (float)(t + (b - t) * row_frac);
    }
  }
}

// ---------------------------------------------------------------------------------------------------
// Progressive files whose scans leave some coefficient without all its bits (a script stopping
// before the last refinement, a band never sent): libjpeg-turbo then smooths the blocks
// (jdcoefct.c, block smoothing), and how it smooths differs between releases (the system library here
// and the one inside sharp), so the pixels would not be sharp's. Declined; with every bit of every
// coefficient present no build smooths, and the decode is exact.

static int coefficients_incomplete(j_decompress_ptr cinfo) {
  if (!cinfo->progressive_mode || cinfo->coef_bits == NULL) return 0;
  for (int c = 0; c < cinfo->num_components; c++)
    for (int k = 0; k < DCTSIZE2; k++)
      if (cinfo->coef_bits[c][k] != 0) return 1;
  return 0;
}

// ---------------------------------------------------------------------------------------------------
// The decode. Returns NULL on success, else the reason it was declined.

typedef struct {
  struct jpeg_decompress_struct cinfo;
  Failure failure;
  ScanLimit scans;
  uint8_t *rows; // two RGB rows: row y lives at rows + (y & 1) * stride
  int32_t *cols;
  double *col_frac;
  PdqRows *pdq; // when the caller asked for PDQ's downsample
} Decoder;

static void decoder_free(Decoder *d) {
  jpeg_destroy_decompress(&d->cinfo);
  free(d->rows);
  free(d->cols);
  free(d->col_frac);
  pdq_rows_free(d->pdq);
}

static const char *decode(Decoder *d, const uint8_t *bytes, size_t length, int size, double max_pixels,
                          float *out, float *pdq64, int pdq_reduce_side, int *width, int *height) {
  struct jpeg_decompress_struct *cinfo = &d->cinfo;
  cinfo->err = jpeg_std_error(&d->failure.pub);
  d->failure.pub.error_exit = on_error_exit;
  d->failure.pub.emit_message = on_emit_message;
  d->failure.reason[0] = 0;
  if (setjmp(d->failure.jump)) return d->failure.reason;

  jpeg_create_decompress(cinfo);
  cinfo->progress = &d->scans.pub;
  d->scans.pub.progress_monitor = on_progress;
  jpeg_mem_src(cinfo, bytes, (unsigned long)length);
  jpeg_save_markers(cinfo, JPEG_APP0 + 1, 0xFFFF);
  jpeg_save_markers(cinfo, JPEG_APP0 + 2, 16);
  jpeg_read_header(cinfo, TRUE);

  if (cinfo->data_precision != 8) return "not 8-bit";
  if (!((cinfo->num_components == 3 && cinfo->jpeg_color_space == JCS_YCbCr) ||
        (cinfo->num_components == 1 && cinfo->jpeg_color_space == JCS_GRAYSCALE)))
    return "not YCbCr or greyscale";
  if ((double)cinfo->image_width * (double)cinfo->image_height > max_pixels) return "too many pixels";
  for (jpeg_saved_marker_ptr m = cinfo->marker_list; m; m = m->next) {
    if (m->marker == JPEG_APP0 + 2 && m->data_length >= 12 && memcmp(m->data, "ICC_PROFILE", 12) == 0)
      return "embedded ICC profile";
    if (m->marker == JPEG_APP0 + 1) {
      if (m->data_length != m->original_length) return "EXIF cut short";
      int orientation = exif_orientation(m->data, m->data_length);
      if (orientation == EXIF_ROTATED) return "EXIF orientation";
      if (orientation == EXIF_UNREADABLE) return "unreadable EXIF";
    }
  }

  cinfo->out_color_space = JCS_RGB; // greyscale is replicated, as libvips's b-w -> sRGB does
  cinfo->dct_method = JDCT_ISLOW;
  cinfo->do_fancy_upsampling = TRUE;
  // A multi-scan file is read whole here (coefficients buffered), so coef_bits is final.
  jpeg_start_decompress(cinfo);
  if (coefficients_incomplete(cinfo)) return "progressive coefficients incomplete";
  if (cinfo->output_components != 3) return "unexpected output components";
  int w = (int)cinfo->output_width, h = (int)cinfo->output_height;
  size_t stride = (size_t)w * 3;

  d->rows = malloc(stride * 2);
  d->cols = malloc(sizeof(int32_t) * 2 * (size_t)size);
  d->col_frac = malloc(sizeof(double) * (size_t)size);
  if (!d->rows || !d->cols || !d->col_frac) return "out of memory";
  if (pdq64 && !(d->pdq = pdq_rows_new(w, h, pdq_reduce_side))) return "out of memory";

  Resize z = {size, w, h, 0, 0, d->cols, d->cols + size, d->col_frac, out};
  z.row_ratio = size > 1 ? (double)(h - 1) / (double)(size - 1) : (double)h;
  z.col_ratio = size > 1 ? (double)(w - 1) / (double)(size - 1) : (double)w;
  for (int c = 0; c < size; c++) {
    double src = z.col_ratio * c;
    double left = fmax(0, floor(src));
    z.col_left[c] = (int32_t)left * 3;
    z.col_right[c] = (int32_t)fmin(w - 1, ceil(src)) * 3;
    z.col_frac[c] = src - left;
  }

  // Output row r needs input rows floor(src) and ceil(src) (clamped), which differ by at most one:
  // it is made as soon as its lower row has been decoded, while its upper row is still in the buffer.
  // Rows neither an output row nor PDQ needs (about half of them at 1 MP without PDQ, more the larger
  // the image; with PDQ, only a remainder under its bottom blocks) are skipped:
  // libjpeg-turbo still entropy-decodes them, but converts no colours, hands over nothing and, past
  // whole iMCU rows, does no IDCT. Only where jpeg_skip_scanlines (libjpeg-turbo 2.1.5, jdapistd.c)
  // keeps the rows after a skip exact; elsewhere every row is read, which is always exact:
  // - max_v_samp_factor 1 (a row group is one row): exact.
  // - Context-row upsampling (h2v2/h1v2 fancy) with max_v_samp_factor 2: exact.
  // - No context rows and max_v_samp_factor 2-4 (plain vertical upsampling: chroma 1-2 pixels wide,
  //   luma sampled v > 1 beside v = 1 chroma, ...): increment_simple_rowgroup_ctr moves the row-group
  //   counter but not the upsampler's next_row_out, so a skip that starts inside a row group hands over
  //   stale rows of the old one.
  // - Context rows with max_v_samp_factor 4 (a v = 2 component beside a v = 4 one: 1x4/1x2/1x1,
  //   4x4/2x2/1x1, ...): jdmainct.c reads the next iMCU row as soon as it emits the first row of an iMCU
  //   row's last (postponed) row group, i.e. with max_v_samp_factor rows left; the skip recognises that
  //   state only with <= 1 row left (right for max_v_samp_factor 2). With 2 or 3 left it drops the
  //   decoded iMCU row, so every later row comes from the iMCU row below it and the decoder asks for one
  //   iMCU row more than the image has: a multi-scan image (progressive, or non-interleaved sequential,
  //   which these factors need past 10 blocks per MCU) then loops forever in jdcoefct.c's
  //   decompress_data, waiting for input after EOI; an arithmetic-coded one decodes zeros past its end
  //   without a warning (legal in arithmetic coding, jdarith.c), a Huffman one warns.
  // (No other max_v_samp_factor has context rows: they need a component sampled half the maximum. The
  // merged upsampler, jdmerge.c, with skipping paths of its own, is never used: fancy upsampling is on.)
  int skippable = cinfo->max_v_samp_factor == 1 ||
                  (cinfo->upsample->need_context_rows && cinfo->max_v_samp_factor == 2);
  int r = 0;
  for (int y = 0; y < h; y++) {
    if (skippable && r < size) {
      int next = (int)fmax(0, floor(z.row_ratio * r)); // the first row output row r still needs
      if (d->pdq) next = (int)fmin(next, pdq_rows_next_row(d->pdq));
      if (next > y) {
        if (jpeg_skip_scanlines(cinfo, (JDIMENSION)(next - y)) != (JDIMENSION)(next - y)) return "no scanline";
        y = next;
      }
    }
    JSAMPROW row = d->rows + (size_t)(y & 1) * stride;
    if (jpeg_read_scanlines(cinfo, &row, 1) != 1) return "no scanline";
    if (d->pdq) pdq_rows_push_rgb(d->pdq, y, row);
    for (; r < size; r++) {
      double src = z.row_ratio * r;
      double top = fmax(0, floor(src));
      int bottom = (int)fmin(h - 1, ceil(src));
      if (bottom > y) break;
      const uint8_t *top_row = d->rows + (size_t)((int)top & 1) * stride;
      const uint8_t *bottom_row = d->rows + (size_t)(bottom & 1) * stride;
      resize_row(&z, r, top_row, bottom_row, src - top);
    }
  }
  if (r != size) return "rows missing";
  // Reads to the end of the data, so that a cut-off or corrupt tail is still seen (as a warning).
  jpeg_finish_decompress(cinfo);
  if (d->pdq && !pdq_rows_finish(d->pdq, pdq64)) return "rows missing";
  *width = w;
  *height = h;
  return NULL;
}

int jpeg_decode_to_tensor(const uint8_t *bytes, size_t length, int size, double max_pixels, int max_scans,
                          float *out, float *pdq64, int pdq_reduce_side, int *width, int *height,
                          char reason[JPEG_DECODE_REASON_MAX]) {
  Decoder *d = calloc(1, sizeof(Decoder));
  if (!d) {
    snprintf(reason, JPEG_DECODE_REASON_MAX, "out of memory");
    return 0;
  }
  d->scans.max_scans = max_scans;
  const char *declined = decode(d, bytes, length, size, max_pixels, out, pdq64, pdq_reduce_side, width, height);
  if (declined) snprintf(reason, JPEG_DECODE_REASON_MAX, "%s", declined);
  decoder_free(d);
  free(d);
  return declined == NULL;
}
