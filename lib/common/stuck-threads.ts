// Threads of this process that were told to stop and never did. A worker thread blocked inside native
// code (a decoder looping in C) cannot be interrupted: V8's termination takes effect only when the
// thread runs JavaScript again. Node joins every worker on exit, so with such a thread process.exit()
// would wait forever; the shutdown path reads this count to exit without that join (shutdown.ts).

let stuck = 0;

/** Counts a thread that did not end when told to; call `ended` if it ends after all. */
export function markThreadStuck(): { ended: () => void } {
  stuck += 1;
  let counted = true;
  return {
    ended: () => {
      if (!counted) return;
      counted = false;
      stuck -= 1;
    },
  };
}

export function stuckThreadCount(): number {
  return stuck;
}
