// The JPEG fast path's Node-API binding; the decoder itself, and why it is exact, is jpeg-decode.c.
//
// API (any thread): decodeToTensor(bytes: Uint8Array, size, maxPixels, maxScans)
//   -> { tensor: Float32Array (NHWC [size, size, 3]), width, height } | string (why it was declined)

#define NAPI_VERSION 8
#include <node_api.h>

#include <stdbool.h>

#include "jpeg-decode.h"

#define CHECK(call)                                                                                   \
  do {                                                                                                \
    if ((call) != napi_ok) {                                                                          \
      napi_throw_error(env, NULL, "jpeg-tensor: " #call " failed");                                  \
      return NULL;                                                                                    \
    }                                                                                                 \
  } while (0)

static napi_value decode_to_tensor(napi_env env, napi_callback_info info) {
  size_t argc = 4;
  napi_value argv[4];
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  if (argc != 4) {
    napi_throw_type_error(env, NULL, "decodeToTensor(bytes, size, maxPixels, maxScans)");
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
  if (type != napi_uint8_array || size < 1 || size > 4096 || max_scans < 1) {
    napi_throw_range_error(env, NULL, "decodeToTensor: invalid arguments");
    return NULL;
  }

  napi_value buffer, tensor;
  void *out;
  size_t elements = (size_t)size * size * 3;
  CHECK(napi_create_arraybuffer(env, elements * sizeof(float), &out, &buffer));
  CHECK(napi_create_typedarray(env, napi_float32_array, elements, buffer, 0, &tensor));

  int width = 0, height = 0;
  char reason[JPEG_DECODE_REASON_MAX];
  napi_value result;
  if (!jpeg_decode_to_tensor(data, length, size, max_pixels, max_scans, out, &width, &height, reason)) {
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
  return result;
}

NAPI_MODULE_INIT(/* napi_env env, napi_value exports */) {
  napi_value fn;
  if (napi_create_function(env, "decodeToTensor", NAPI_AUTO_LENGTH, decode_to_tensor, NULL, &fn) != napi_ok ||
      napi_set_named_property(env, exports, "decodeToTensor", fn) != napi_ok)
    return NULL;
  return exports;
}
