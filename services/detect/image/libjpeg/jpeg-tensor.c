// The native addon's Node-API binding: the JPEG fast path (the decoder itself, and why it is exact, is
// jpeg-decode.c) and PDQ's downsample (pdq-downsample.c).
//
// API (any thread):
//   decodeToTensor(bytes: Uint8Array, size, maxPixels, maxScans, pdq: boolean)
//     -> { tensor: Float32Array (NHWC [size, size, 3]), width, height, pdq?: Float32Array (64×64) }
//        | string (why it was declined)
//   pdqDownsample(rgb: Uint8Array (interleaved 8-bit RGB), width, height) -> Float32Array (64×64)

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

static napi_value decode_to_tensor(napi_env env, napi_callback_info info) {
  size_t argc = 5;
  napi_value argv[5];
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  if (argc != 5) {
    napi_throw_type_error(env, NULL, "decodeToTensor(bytes, size, maxPixels, maxScans, pdq)");
    return NULL;
  }
  bool is_typed = false;
  CHECK(napi_is_typedarray(env, argv[0], &is_typed));
  if (!is_typed) {
    napi_throw_type_error(env, NULL, "bytes must be a Uint8Array");
    return NULL;
  }
  napi_typedarray_type type;
  size_t length;
  void *data;
  CHECK(napi_get_typedarray_info(env, argv[0], &type, &length, &data, NULL, NULL));
  int32_t size, max_scans;
  double max_pixels;
  CHECK(napi_get_value_int32(env, argv[1], &size));
  CHECK(napi_get_value_double(env, argv[2], &max_pixels));
  CHECK(napi_get_value_int32(env, argv[3], &max_scans));
  bool with_pdq;
  CHECK(napi_get_value_bool(env, argv[4], &with_pdq));
  if (type != napi_uint8_array || size < 1 || size > 4096 || max_scans < 1) {
    napi_throw_range_error(env, NULL, "decodeToTensor: invalid arguments");
    return NULL;
  }

  napi_value buffer, tensor;
  void *out;
  size_t elements = (size_t)size * size * 3;
  CHECK(napi_create_arraybuffer(env, elements * sizeof(float), &out, &buffer));
  CHECK(napi_create_typedarray(env, napi_float32_array, elements, buffer, 0, &tensor));

  napi_value pdq_buffer, pdq;
  void *pdq64 = NULL;
  if (with_pdq) {
    CHECK(napi_create_arraybuffer(env, sizeof(float) * PDQ_SIDE * PDQ_SIDE, &pdq64, &pdq_buffer));
    CHECK(napi_create_typedarray(env, napi_float32_array, PDQ_SIDE * PDQ_SIDE, pdq_buffer, 0, &pdq));
  }

  int width = 0, height = 0;
  char reason[JPEG_DECODE_REASON_MAX];
  napi_value result;
  if (!jpeg_decode_to_tensor(data, length, size, max_pixels, max_scans, out, pdq64, &width, &height, reason)) {
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
  size_t argc = 3;
  napi_value argv[3];
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  bool is_typed = false;
  if (argc == 3) CHECK(napi_is_typedarray(env, argv[0], &is_typed));
  if (!is_typed) {
    napi_throw_type_error(env, NULL, "pdqDownsample(rgb: Uint8Array, width, height)");
    return NULL;
  }
  napi_typedarray_type type;
  size_t length;
  void *data;
  CHECK(napi_get_typedarray_info(env, argv[0], &type, &length, &data, NULL, NULL));
  int32_t width, height;
  CHECK(napi_get_value_int32(env, argv[1], &width));
  CHECK(napi_get_value_int32(env, argv[2], &height));
  if (type != napi_uint8_array || width < 1 || height < 1 || length < (size_t)width * height * 3) {
    napi_throw_range_error(env, NULL, "pdqDownsample: invalid arguments");
    return NULL;
  }
  napi_value buffer, result;
  void *out;
  CHECK(napi_create_arraybuffer(env, sizeof(float) * PDQ_SIDE * PDQ_SIDE, &out, &buffer));
  CHECK(napi_create_typedarray(env, napi_float32_array, PDQ_SIDE * PDQ_SIDE, buffer, 0, &result));
  PdqRows *rows = pdq_rows_new(width, height);
  if (!rows) {
    napi_throw_error(env, "ERR_MEMORY", "pdqDownsample: out of memory");
    return NULL;
  }
  const uint8_t *rgb = data;
  for (int32_t y = 0; y < height; y++) pdq_rows_push_rgb(rows, rgb + (size_t)y * width * 3);
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
