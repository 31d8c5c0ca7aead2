// A GET held in flight by its client: its head is sent but for the blank line that ends it, so the
// server has the request under way (no route can answer it yet) until `finish` sends the rest. For a
// process whose routes answer at once (health, the operator), the way to have a request in flight when
// a signal comes.

import { connect } from 'node:net';

export interface HeldAnswer {
  /** 0 when the server closed the connection without an answer. */
  status: number;
  connection: string;
  body: string;
}

export function headInFlight(url: string, path: string) {
  const { hostname, port } = new URL(url);
  const socket = connect(Number(port), hostname);
  let raw = '';
  socket.setEncoding('latin1');
  socket.on('data', (chunk) => (raw += chunk));
  // Resolved when the server closes the connection (a draining server does so after its answer): the
  // answer, whole, or status 0 when none came.
  const answered = new Promise<HeldAnswer>((resolve, reject) => {
    socket.on('error', reject);
    socket.on('close', () => {
      const [head = '', body = ''] = raw.split('\r\n\r\n');
      resolve({
        status: Number(/^HTTP\/1\.1 (\d+)/.exec(head)?.[1] ?? 0),
        connection: /^connection: *(.*)$/im.exec(head)?.[1]?.trim() ?? '',
        body,
      });
    });
  });
  // Awaited by `finish` or `answered`; a failure before then must not count as unhandled.
  answered.catch(() => undefined);
  socket.write(`GET ${path} HTTP/1.1\r\nHost: ${hostname}\r\n`);
  return {
    finish: () => {
      socket.write('\r\n');
      return answered;
    },
    /** The outcome without finishing the head (the server gave up on it, or the test ends it). */
    answered,
    destroy: () => socket.destroy(),
  };
}
