// How production starts node: the image (services/Dockerfile: ENV and ENTRYPOINT) and `npm start` set
// these, and the benchmarks start our server with them; test/node-runtime.test.ts keeps the three in
// step. Measured with bench/detect-cost.ts (~1 MP JPEGs, concurrency 8, medians of 3 rounds, each
// setting undone alone in the same run; docs/performance.md, "What a ~1 MP JPEG costs the server"):
//
// - MALLOC_ARENA_MAX=2: glibc otherwise gives each thread that allocates (libvips, ONNX Runtime, the
//   scoring workers) its own malloc arena, and freed buffers stay spread over them: 287 → 270 MiB peak
//   RSS, same CPU per request (~50 MiB before the workers freed their buffers themselves).
// - --max-semi-space-size=1 (MiB): V8's young generation otherwise grows to tens of MiB on the main
//   thread, which allocates a Buffer per upload chunk: 301 → 270 MiB peak RSS, 12.4 → 11.5 ms of CPU
//   per request.

export const PRODUCTION_ENV: Readonly<Record<string, string>> = { MALLOC_ARENA_MAX: '2' };
export const PRODUCTION_NODE_FLAGS: readonly string[] = ['--max-semi-space-size=1'];
