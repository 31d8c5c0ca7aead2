// A stand-in decoder process for the decoder pool's supervision tests; never used outside tests. An
// image 13 px wide makes it die mid-job, as a crashing native decoder would; one 21 px wide makes it
// spin on the CPU (an image that costs more than any ordinary one); one 22 px wide makes it wait
// without using any CPU (a decoder the machine gives no time to); others are answered at once with a
// model input of zeros.
const send = process.send.bind(process);
process.on('disconnect', () => process.exit(0));
process.on('message', ({ id, probed }) => {
  if (probed.width === 13) process.exit(70);
  if (probed.width === 21) for (;;);
  if (probed.width === 22) return; // never answered: the pool's wall deadline ends it
  send({ id, ok: true, tensor: new Float32Array(4), decodeStartedAt: Date.now(), decodeMs: 1 });
});
send({ ready: true });
