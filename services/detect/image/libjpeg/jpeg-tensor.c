// The native addon's Node-API binding: the JPEG fast path (the decoder itself, and why it is exact, is
// jpeg-decode.c) and PDQ's downsample (pdq-downsample.c).
//
// API (any thread):
//   decodeToTensor(bytes: Uint8Array, size, maxPixels, maxScans, pdqReduceSide)   pdqReduceSide: -1 no
//     PDQ; else PDQ's downsample too, a large frame averaged over blocks first (> 0; pdq-downsample.h)
//     -> { tensor: Float32Array (NHWC [size, size, 3]), width, height, pdq?: Float32Array (64×64) }
//        | string (why it was declined)
//   pdqDownsample(rgb: Uint8Array (interleaved 8-bit RGB), width, height, reduceSide) -> Float32Array (64×64)

#define NAPI_VERSION 8
#include <node_api.h>

#include <stdbool.h>

#include "jpeg-decode.h"
#include "pdq-downsample.h"

#define CHECK(call)                                                                                   \
  do {                                                                                                \
    if ((call) != napi_ok) {                                                                          \
      napi_throw_error(env, NULL, "jpeg-tensor: " #call " failed");                                  \
      return NULL;                                                                                    \
    }                                                                                                 \
  } while (0)

// Exactly `n` arguments into argv, the first a Uint8Array (its bytes into data and length); false (a
// TypeError naming the usage thrown) otherwise.
static bool arguments(napi_env env, napi_callback_info info, size_t n, napi_value *argv, const char *usage,
                      uint8_t **data, size_t *length) {
  size_t argc = n;
  bool is_typed = false;
  napi_typedarray_type type;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc != n ||
      napi_is_typedarray(env, argv[0], &is_typed) != napi_ok || !is_typed ||
      napi_get_typedarray_info(env, argv[0], &type, length, (void **)data, NULL, NULL) != napi_ok ||
      type != napi_uint8_array) {
    napi_throw_type_error(env, NULL, usage);
    return false;
  }
  return true;
}

// The number arguments argv[1..n-1] as int32s (a TypeError naming the usage thrown when one is not a
// number); `real` marks the one read as a double.
static bool numbers(napi_env env, napi_value *argv, size_t n, const char *usage, int32_t *ints, int real,
                    double *value) {
  for (size_t i = 1; i < n; i++) {
    napi_valuetype type;
    if (napi_typeof(env, argv[i], &type) != napi_ok || type != napi_number) {
      napi_throw_type_error(env, NULL, usage);
      return false;
    }
    if ((int)i == real ? napi_get_value_double(env, argv[i], value) != napi_ok
                       : napi_get_value_int32(env, argv[i], &ints[i]) != napi_ok) {
      napi_throw_type_error(env, NULL, usage);
      return false;
    }
  }
  return true;
}

// A new Float32Array of `count` elements and where its data is; false (an error thrown) when it failed.
static bool float32_array(napi_env env, size_t count, napi_value *array, void **data) {
  napi_value buffer;
  if (napi_create_arraybuffer(env, count * sizeof(float), data, &buffer) != napi_ok ||
      napi_create_typedarray(env, napi_float32_array, count, buffer, 0, array) != napi_ok) {
    napi_throw_error(env, NULL, "jpeg-tensor: no Float32Array");
    return false;
  }
  return true;
}

static napi_value decode_to_tensor(napi_env env, napi_callback_info info) {
  napi_value argv[5];
  uint8_t *data;
  size_t length;
  static const char usage[] = "decodeToTensor(bytes: Uint8Array, size, maxPixels, maxScans, pdqReduceSide)";
  int32_t ints[5];
  double max_pixels;
  if (!arguments(env, info, 5, argv, usage, &data, &length) || !numbers(env, argv, 5, usage, ints, 2, &max_pixels))
    return NULL;
  int32_t size = ints[1], max_scans = ints[3], pdq_reduce_side = ints[4];
  bool with_pdq = pdq_reduce_side >= 0;
  if (size < 1 || size > 4096 || max_scans < 1) {
    napi_throw_range_error(env, NULL, "decodeToTensor: invalid arguments");
    return NULL;
  }

  napi_value tensor, pdq;
  void *out, *pdq64 = NULL;
  if (!float32_array(env, (size_t)size * size * 3, &tensor, &out)) return NULL;
  if (with_pdq && !float32_array(env, PDQ_SIDE * PDQ_SIDE, &pdq, &pdq64)) return NULL;

  int width = 0, height = 0;
  char reason[JPEG_DECODE_REASON_MAX];
  napi_value result;
  if (!jpeg_decode_to_tensor(data, length, size, max_pixels, max_scans, out, pdq64, pdq_reduce_side, &width, &height,
                             reason)) {
    CHECK(napi_create_string_utf8(env, reason, NAPI_AUTO_LENGTH, &result));
    return result;
  }
  napi_value w, h;
  CHECK(napi_create_object(env, &result));
  CHECK(napi_create_int32(env, width, &w));
  CHECK(napi_create_int32(env, height, &h));
  CHECK(napi_set_named_property(env, result, "tensor", tensor));
  CHECK(napi_set_named_property(env, result, "width", w));
  CHECK(napi_set_named_property(env, result, "height", h));
  if (with_pdq) CHECK(napi_set_named_property(env, result, "pdq", pdq));
  return result;
}

static napi_value pdq_downsample(napi_env env, napi_callback_info info) {
  napi_value argv[4];
  uint8_t *data;
  size_t length;
  static const char usage[] = "pdqDownsample(rgb: Uint8Array, width, height, reduceSide)";
  int32_t ints[4];
  if (!arguments(env, info, 4, argv, usage, &data, &length) || !numbers(env, argv, 4, usage, ints, 0, NULL))
    return NULL;
  int32_t width = ints[1], height = ints[2], side = ints[3];
  if (width < 1 || height < 1 || side < 0 || length < (size_t)width * height * 3) {
    napi_throw_range_error(env, NULL, "pdqDownsample: invalid arguments");
    return NULL;
  }
  napi_value result;
  void *out;
  if (!float32_array(env, PDQ_SIDE * PDQ_SIDE, &result, &out)) return NULL;
  PdqRows *rows = pdq_rows_new(width, height, side);
  if (!rows) {
    napi_throw_error(env, "ERR_MEMORY", "pdqDownsample: out of memory");
    return NULL;
  }
  for (int32_t y = 0; y < height; y++) pdq_rows_push_rgb(rows, y, data + (size_t)y * width * 3);
  pdq_rows_finish(rows, out);
  pdq_rows_free(rows);
  return result;
}

NAPI_MODULE_INIT(/* napi_env env, napi_value exports */) {
  napi_value decode, pdq;
  if (napi_create_function(env, "decodeToTensor", NAPI_AUTO_LENGTH, decode_to_tensor, NULL, &decode) != napi_ok ||
      napi_set_named_property(env, exports, "decodeToTensor", decode) != napi_ok ||
      napi_create_function(env, "pdqDownsample", NAPI_AUTO_LENGTH, pdq_downsample, NULL, &pdq) != napi_ok ||
      napi_set_named_property(env, exports, "pdqDownsample", pdq) != napi_ok)
    return NULL;
  return exports;
}
