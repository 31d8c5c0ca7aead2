// libFuzzer target: the JPEG fast path's decoder (services/detect/image/libjpeg/jpeg-decode.c, what the
// addon runs, PDQ's filter fed its rows on every other input) on arbitrary bytes, built with ASan and UBSan (jpeg-decode-fuzz.test.ts builds and runs it;
// docs/security-testing.md for a longer campaign). The input is the whole request body, as the service
// hands it over. Any sanitizer report, crash, leak, or input over the per-input timeout is a finding.
//
// The pixel bound is 4 MP, not the service's 200 MP: an input declaring a huge image would otherwise cost
// seconds per run and drown the search; the decoder's code is the same at any size.

#include <stddef.h>
#include <stdint.h>

#include "../../services/detect/image/libjpeg/jpeg-decode.h"
#include "../../services/detect/image/libjpeg/pdq-downsample.h"

enum { SIZE = 224, MAX_SCANS = 100 };
#define MAX_PIXELS (4.0 * 1024 * 1024)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static float tensor[SIZE * SIZE * 3];
  static float pdq[PDQ_SIDE * PDQ_SIDE];
  char reason[JPEG_DECODE_REASON_MAX];
  int width = 0, height = 0;
  // Odd lengths hash too, their reduce side varied by the length (small sides average most images over
  // blocks first; 0 never): the filter's and the blocks' buffers are exercised.
  static const int sides[] = {512, 0, 16, 100};
  float *pdq64 = size & 1 ? pdq : NULL;
  int pdq_reduce_side = sides[(size >> 1) & 3];
  if (jpeg_decode_to_tensor(data, size, SIZE, MAX_PIXELS, MAX_SCANS, tensor, pdq64, pdq_reduce_side, &width, &height,
                            reason)) {
    // Taken: the image is what the header said, and every element is a pixel value in [0, 1].
    if (width < 1 || height < 1 || (double)width * height > MAX_PIXELS) __builtin_trap();
    for (size_t i = 0; i < sizeof tensor / sizeof tensor[0]; i++)
      if (!(tensor[i] >= 0.0f && tensor[i] <= 1.0f)) __builtin_trap();
    // A box filter's means of luma in [0, 255] stay there (with float rounding's slack).
    if (pdq64)
      for (size_t i = 0; i < PDQ_SIDE * PDQ_SIDE; i++)
        if (!(pdq[i] >= -0.01f && pdq[i] <= 255.01f)) __builtin_trap();
  }
  return 0;
}
