// How every model's ONNX Runtime session is opened: the CPU execution provider, graph optimizations on
// (ORT fuses Conv+BatchNorm+Clip), one inference on `intraOpThreads` threads.

import * as ort from 'onnxruntime-node';

/**
 * ONNX Runtime's telemetry writes session files (.ses, mat-debug-*.log) into TMPDIR when a session is
 * created; nothing of ours may touch the disk, and we never phone home. ORT reads the process
 * environment natively, and a worker thread's process.env is a private copy: call this on the main
 * thread before starting workers, too.
 */
export function disableOrtTelemetry(): void {
  process.env.ORT_DISABLE_TELEMETRY = '1';
}

/** A session on `file`, checked to have the named input and output. */
export async function openSession(
  file: string,
  intraOpThreads: number,
  io: { input: string; output: string },
): Promise<ort.InferenceSession> {
  disableOrtTelemetry();
  const session = await ort.InferenceSession.create(file, {
    executionProviders: ['cpu'],
    graphOptimizationLevel: 'all',
    executionMode: 'sequential',
    intraOpNumThreads: intraOpThreads,
    interOpNumThreads: 1,
    enableCpuMemArena: true,
    enableMemPattern: true,
    // Idle intra-op threads sleep instead of spin-waiting: spinning threads steal the cores that
    // decoding (libvips) and the other workers need.
    extra: { session: { intra_op: { allow_spinning: '0' } } },
  });
  if (!session.inputNames.includes(io.input) || !session.outputNames.includes(io.output)) {
    await session.release();
    throw new Error(`${file}: expected input '${io.input}' and output '${io.output}'`);
  }
  return session;
}
