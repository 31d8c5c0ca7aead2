// Writes JPEGs with libjpeg itself, one per line of stdin, for the fast path's differential test and
// the fuzzers' seed corpus (jpeg-space.ts builds and drives it). A line:
//
//   <path> <width> <height> <sampling> <scans> <coding> <restart> <quality> <seed>
//
//   sampling  HxV of each component: "2x2,1x1,1x1" (YCbCr) or "1x4" (greyscale)
//   scans     sequential (interleaved when an MCU fits, else one scan per component) | separate (one
//             scan per component) | progressive (libjpeg's default script when an MCU fits, else a
//             per-component one) | incomplete (a progression that leaves coefficients without all
//             their bits, chosen by the seed: AC unrefined, DC unrefined, luma AC 1-5 only, DC only)
//             | many (one coefficient a scan, then every refinement from a point transform of 10)
//   coding    huffman | arithmetic
//   restart   restart interval in MCUs (0: none)
//
// The pixels are a deterministic function of the seed: colour gradients, edges and noise, so that every
// component's upsampling shows in the decoded rows. Any libjpeg error ends the run with status 1.

#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>
#include <jerror.h>

typedef struct {
  struct jpeg_error_mgr pub;
  jmp_buf jump;
} Failure;

static void on_error_exit(j_common_ptr cinfo) {
  char message[JMSG_LENGTH_MAX];
  (*cinfo->err->format_message)(cinfo, message);
  fprintf(stderr, "make-jpeg: %s\n", message);
  longjmp(((Failure *)cinfo->err)->jump, 1);
}

static uint32_t next_random(uint32_t *state) {
  uint32_t x = *state;
  x ^= x << 13;
  x ^= x >> 17;
  x ^= x << 5;
  return *state = x;
}

static void fill_row(uint8_t *row, int y, int width, int height, int channels, uint32_t *state) {
  for (int x = 0; x < width; x++) {
    uint32_t noise = next_random(state);
    int edge = ((x / 5) ^ (y / 3)) & 1 ? 60 : 0;
    int r = (x * 255) / (width > 1 ? width - 1 : 1);
    int g = (y * 255) / (height > 1 ? height - 1 : 1);
    int b = (int)(((unsigned)(x * 7 + y * 13)) & 0xff);
    int v[3] = {r + edge, g + (int)(noise & 31), b ^ (int)((noise >> 8) & 63)};
    if (channels == 1) v[0] = (r + g + edge + (int)(noise & 63)) / 2;
    for (int c = 0; c < channels; c++) row[x * channels + c] = (uint8_t)(v[c] < 0 ? 0 : v[c] > 255 ? 255 : v[c]);
  }
}

// One scan per component: sequential (0-63), or a small progression (DC, AC, refinements).
static jpeg_scan_info *separate_scans(int components, int progressive, int *count) {
  static jpeg_scan_info scans[4 * 3];
  int n = 0;
  for (int c = 0; c < components; c++) {
    if (!progressive) {
      scans[n++] = (jpeg_scan_info){1, {c}, 0, 63, 0, 0};
      continue;
    }
    scans[n++] = (jpeg_scan_info){1, {c}, 0, 0, 0, 1};
    scans[n++] = (jpeg_scan_info){1, {c}, 1, 63, 0, 1};
    scans[n++] = (jpeg_scan_info){1, {c}, 0, 0, 1, 0};
    scans[n++] = (jpeg_scan_info){1, {c}, 1, 63, 1, 0};
  }
  *count = n;
  return scans;
}

// The DC of every component: one interleaved scan when an MCU fits, else one per component.
static int dc_scans(jpeg_scan_info *scans, int components, int fits, int al) {
  if (fits) {
    scans[0] = (jpeg_scan_info){components, {0, 1, 2}, 0, 0, 0, al};
    return 1;
  }
  for (int c = 0; c < components; c++) scans[c] = (jpeg_scan_info){1, {c}, 0, 0, 0, al};
  return components;
}

// Progressions that leave coefficients incomplete (libjpeg only requires every component's DC).
static jpeg_scan_info *incomplete_scans(int components, int fits, uint32_t variant, int *count) {
  static jpeg_scan_info scans[16];
  int n = dc_scans(scans, components, fits, variant % 4 == 1 ? 1 : 0);
  for (int c = 0; c < components; c++) {
    switch (variant % 4) {
    case 0: scans[n++] = (jpeg_scan_info){1, {c}, 1, 63, 0, 1}; break; // AC without its last bit
    case 1: scans[n++] = (jpeg_scan_info){1, {c}, 1, 63, 0, 0}; break; // DC without its last bit
    case 2: scans[n++] = (jpeg_scan_info){1, {c}, 1, c == 0 ? 5 : 63, 0, 0}; break; // luma 6-63 missing
    default: break;                                                         // DC only
    }
  }
  *count = n;
  return scans;
}

// One coefficient a scan, first at a point transform of 10 (libjpeg's encoder limit), then every
// refinement: 1 + 63 × 11 scans per component.
static jpeg_scan_info *many_scans(int components, int fits, int *count) {
  static jpeg_scan_info scans[3 + 3 * 63 * 11];
  int n = dc_scans(scans, components, fits, 0);
  for (int c = 0; c < components; c++)
    for (int k = 1; k < 64; k++) {
      scans[n++] = (jpeg_scan_info){1, {c}, k, k, 0, 10};
      for (int al = 10; al > 0; al--) scans[n++] = (jpeg_scan_info){1, {c}, k, k, al, al - 1};
    }
  *count = n;
  return scans;
}

typedef struct {
  int width, height, components, restart, quality;
  int factors[3][2];
  const char *scans, *coding;
  uint32_t seed;
} Job;

// Everything but the error recovery, which make() holds (libjpeg errors longjmp out of here).
static void encode(struct jpeg_compress_struct *cinfo, const Job *job, FILE *out, uint8_t *row) {
  jpeg_create_compress(cinfo);
  jpeg_stdio_dest(cinfo, out);
  cinfo->image_width = (JDIMENSION)job->width;
  cinfo->image_height = (JDIMENSION)job->height;
  cinfo->input_components = job->components;
  cinfo->in_color_space = job->components == 3 ? JCS_RGB : JCS_GRAYSCALE;
  jpeg_set_defaults(cinfo);
  jpeg_set_quality(cinfo, job->quality, TRUE);
  int blocks = 0;
  for (int c = 0; c < job->components; c++) {
    cinfo->comp_info[c].h_samp_factor = job->factors[c][0];
    cinfo->comp_info[c].v_samp_factor = job->factors[c][1];
    blocks += job->factors[c][0] * job->factors[c][1];
  }
  int fits = job->components == 1 || blocks <= 10; // libjpeg's limit on blocks in an interleaved MCU
  int progressive = strcmp(job->scans, "progressive") == 0;
  if (strcmp(job->scans, "incomplete") == 0) {
    int count;
    cinfo->scan_info = incomplete_scans(job->components, fits, job->seed, &count);
    cinfo->num_scans = count;
  } else if (strcmp(job->scans, "many") == 0) {
    int count;
    cinfo->scan_info = many_scans(job->components, fits, &count);
    cinfo->num_scans = count;
  } else if (strcmp(job->scans, "separate") == 0 || (!fits && job->components > 1)) {
    int count;
    cinfo->scan_info = separate_scans(job->components, progressive, &count);
    cinfo->num_scans = count;
  } else if (progressive) {
    jpeg_simple_progression(cinfo);
  } else if (strcmp(job->scans, "sequential") != 0) {
    ERREXIT(cinfo, JERR_NOT_COMPILED);
  }
  cinfo->arith_code = strcmp(job->coding, "arithmetic") == 0;
  cinfo->optimize_coding = FALSE;
  cinfo->restart_interval = (unsigned int)job->restart;
  jpeg_start_compress(cinfo, TRUE);
  uint32_t state = job->seed ? job->seed : 1;
  while (cinfo->next_scanline < cinfo->image_height) {
    fill_row(row, (int)cinfo->next_scanline, job->width, job->height, job->components, &state);
    JSAMPROW rows[1] = {row};
    jpeg_write_scanlines(cinfo, rows, 1);
  }
  jpeg_finish_compress(cinfo);
}

static int make(const char *path, const Job *job) {
  FILE *out = fopen(path, "wb");
  if (!out) {
    perror(path);
    return 1;
  }
  uint8_t *row = malloc((size_t)job->width * (size_t)job->components);
  struct jpeg_compress_struct cinfo;
  Failure failure;
  cinfo.err = jpeg_std_error(&failure.pub);
  failure.pub.error_exit = on_error_exit;
  int failed = setjmp(failure.jump);
  if (!failed) encode(&cinfo, job, out, row);
  jpeg_destroy_compress(&cinfo);
  free(row);
  return fclose(out) != 0 || failed;
}

// "2x2,1x1,1x1" or "1x4": the number of components, or 0.
static int parse_sampling(const char *sampling, int factors[3][2]) {
  int components = 0;
  for (const char *p = sampling; p && components < 3; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL) {
    if (sscanf(p, "%dx%d", &factors[components][0], &factors[components][1]) != 2) return 0;
    components++;
  }
  return components == 1 || components == 3 ? components : 0;
}

int main(void) {
  char line[4096], path[3000], sampling[64], scans[32], coding[32];
  int width, height, restart, quality;
  unsigned seed;
  while (fgets(line, sizeof line, stdin)) {
    if (line[0] == '\n') continue;
    if (sscanf(line, "%2999s %d %d %63s %31s %31s %d %d %u", path, &width, &height, sampling, scans, coding,
               &restart, &quality, &seed) != 9 ||
        width < 1 || height < 1) {
      fprintf(stderr, "make-jpeg: bad line: %s", line);
      return 1;
    }
    Job job = {width, height, 0, restart, quality, {{0}}, scans, coding, seed};
    job.components = parse_sampling(sampling, job.factors);
    if (!job.components || make(path, &job)) {
      fprintf(stderr, "make-jpeg: failed: %s", line);
      return 1;
    }
  }
  return 0;
}
