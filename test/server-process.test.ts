// The real `npm start` process: boot-time validation, nothing written to disk, graceful SIGTERM.

import { createHash } from 'node:crypto';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { Agent, request } from 'node:http';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import sharp from 'sharp';
import { afterAll, describe, expect, it } from 'vitest';
import { bmpFromRgb } from './fixtures/bmp.ts';
import { CORPUS, fixture } from './fixtures/corpus.ts';
import { type ServerProcess, startServer } from './support/server-process.ts';

const servers: ServerProcess[] = [];

interface Upload {
  name: string;
  bytes: Buffer;
}

/** What of the sent images a text shows: their SHA-256 (hex either case, base64 with or without padding,
 * base64url), file names and byte counts (as whole numbers). */
function imageTraces(text: string, uploads: Upload[]): string[] {
  const numbers = new Set(text.match(/\d+/g));
  const found: string[] = [];
  for (const { name, bytes } of uploads) {
    const digest = createHash('sha256').update(bytes).digest();
    const hex = digest.toString('hex');
    const forms = [
      hex,
      hex.toUpperCase(),
      digest.toString('base64').replace(/=+$/, ''),
      digest.toString('base64url'),
    ];
    for (const form of forms) if (text.includes(form)) found.push(`${name}: SHA-256 ${form}`);
    if (text.includes(name)) found.push(`${name}: file name`);
    if (numbers.has(String(bytes.length))) found.push(`${name}: byte count ${bytes.length}`);
  }
  return found;
}

/** The log less the numbers every process logs whatever it serves: times, pid, port, durations. */
const withoutProcessNumbers = (output: string, port: number) =>
  output.replace(/"(time|pid|port|ms)":\d+/g, '').replaceAll(`:${port}`, ':PORT');
afterAll(async () => {
  await Promise.all(servers.map((s) => s.stop()));
});

describe('the server process', () => {
  it('refuses to boot on invalid configuration, naming the variable', async () => {
    const server = await startServer({ THRESHOLD_ALLOW: 'lots' }, { waitFor: 'nothing' });
    expect(await server.exited).toBe(2);
    // The leader has exited; stop() also ends what it started (its group) before the file ends.
    await server.stop();
    expect(server.output()).toMatch(/THRESHOLD_ALLOW must be a number/);
  });

  it('scores every accepted format without writing a single file to TMPDIR', async () => {
    const tmp = mkdtempSync(join(tmpdir(), 'nsfwdetector-tmp-'));
    try {
      const server = await startServer({
        TMPDIR: tmp,
        TEMP: tmp,
        TMP: tmp,
        ANON_PER_MINUTE: '1000',
        ANON_PER_DAY: '1000',
      });
      servers.push(server);
      // Every corpus file that should score, plus a BMP (the corpus has none) made from a corpus photo.
      const uploads = Object.entries(CORPUS)
        .filter(([, expected]) => 'ok' in expected)
        .map(([name]): Upload => ({ name, bytes: readFileSync(fixture(name)) }));
      const { data, info } = await sharp(fixture('320x240.jpg')).raw().toBuffer({ resolveWithObject: true });
      uploads.push({ name: 'photo.bmp', bytes: bmpFromRgb(data, info.width, info.height) });
      const formats = new Set<string>();
      const answers: string[] = [];
      for (const { name, bytes } of uploads) {
        const body = new FormData();
        body.append('file', new Blob([new Uint8Array(bytes)]), name);
        const res = await fetch(`${server.url}/api/public/detect`, { method: 'POST', body });
        expect(res.status, name).toBe(200);
        answers.push(await res.clone().text());
        const { image } = (
          (await res.json()) as { data: { image: { format: string; bytes: number; sha256: string } } }
        ).data;
        // Through the real worker pool, which takes the upload buffer over.
        expect(image.bytes, name).toBe(bytes.length);
        expect(image.sha256, name).toBe(createHash('sha256').update(bytes).digest('hex'));
        formats.add(image.format);
      }
      expect([...formats].sort()).toEqual(['bmp', 'gif', 'jpeg', 'png', 'tiff', 'webp']);
      expect(readdirSync(tmp)).toEqual([]);
      // Nothing about the images reaches the log either: only startup lines, no request lines, and none of
      // the images' digests, names or sizes.
      const log = server.output();
      expect(log).not.toMatch(/detect/);
      expect(imageTraces(withoutProcessNumbers(log, server.port), uploads)).toEqual([]);
      // The same search finds them where they are: each answer names its image's digest and size, and a
      // line that logged a name and a base64 digest would be caught.
      const [first] = uploads as [Upload];
      const base64 = createHash('sha256').update(first.bytes).digest('base64');
      expect(imageTraces(`{"file":"${first.name}","digest":"${base64}"}`, [first])).toEqual([
        `${first.name}: SHA-256 ${base64.replace(/=+$/, '')}`,
        `${first.name}: file name`,
      ]);
      for (const [i, upload] of uploads.entries())
        expect(imageTraces(answers[i] as string, [upload])).toEqual(
          // arrayContaining: an answer's other numbers (timing_ms) may equal a small image's size.
          expect.arrayContaining([
            `${upload.name}: SHA-256 ${createHash('sha256').update(upload.bytes).digest('hex')}`,
            `${upload.name}: byte count ${upload.bytes.length}`,
          ]),
        );
    } finally {
      rmSync(tmp, { recursive: true, force: true });
    }
  });

  it('finishes an in-flight upload on SIGTERM, refuses new work, and exits 0', async () => {
    const server = await startServer();
    const jpeg = readFileSync(fixture('320x240.jpg'));
    const half = Math.floor(jpeg.length / 2);
    let status = 0;
    let responseBody = '';
    const done = new Promise<void>((resolve, reject) => {
      const req = request(
        `${server.url}/api/public/detect`,
        { method: 'POST', headers: { 'content-type': 'image/jpeg', 'content-length': String(jpeg.length) } },
        (res) => {
          status = res.statusCode ?? 0;
          res.on('data', (c) => (responseBody += c));
          res.on('end', resolve);
        },
      );
      req.on('error', reject);
      req.write(jpeg.subarray(0, half));
      // The request is now admitted and streaming; stop the server under it, then finish the body.
      setTimeout(() => {
        server.proc.kill('SIGTERM');
        setTimeout(() => req.end(jpeg.subarray(half)), 300);
      }, 300);
    });
    await done;
    expect(status).toBe(200);
    expect(JSON.parse(responseBody).data.image.format).toBe('jpeg');
    expect(await server.exited).toBe(0);
    await expect(fetch(`${server.url}/api/public/health`)).rejects.toThrow();
  });

  it('answers a refused upload to a client that sends its whole body first, and keeps the connection', async () => {
    // Every request is over the minute limit: refused (429) before the body is read.
    const server = await startServer({ ANON_PER_MINUTE: '0' });
    servers.push(server);
    const body = Buffer.alloc(5 * 1024 * 1024, 0xd8);
    const agent = new Agent({ keepAlive: true, maxSockets: 1 });
    const reused: boolean[] = [];
    for (let i = 0; i < 3; i++) {
      const { status, text } = await new Promise<{ status: number; text: string }>((resolve, reject) => {
        const req = request(
          `${server.url}/api/public/detect`,
          {
            method: 'POST',
            agent,
            headers: { 'content-type': 'image/jpeg', 'content-length': String(body.length) },
          },
          (res) => {
            reused.push(req.reusedSocket);
            let text = '';
            res.on('data', (c) => (text += c));
            res.on('end', () => resolve({ status: res.statusCode ?? 0, text }));
          },
        );
        req.on('error', reject); // a reset instead of our answer would land here
        req.end(body);
      });
      // Let the agent take the socket back before the next request.
      await new Promise((r) => setTimeout(r, 50));
      expect(status).toBe(429);
      expect(JSON.parse(text)).toMatchObject({ code: 4290 });
    }
    expect(reused).toEqual([false, true, true]);
    agent.destroy();
  });

  it('cuts off a 2 GB upload early instead of buffering it', async () => {
    const server = await startServer({ ANON_PER_MINUTE: '1000', ANON_PER_DAY: '1000' });
    servers.push(server);
    const MiB = 1024 * 1024;

    // Announced as 2 GB: refused before a byte of the body is read.
    const announced = await rawUpload(server.port, { 'Content-Length': String(2 * 1024 * MiB) }, 0);
    expect(announced.response).toMatch(/^HTTP\/1\.1 400/);
    expect(announced.response).toContain('"code":4003');

    // Chunked, no length, announced as nothing: the client sends the limit plus 16 MiB (socket buffers'
    // worth), then waits with the body unfinished. The 4003 must come for what was sent, i.e. the server
    // refused at the limit, not after the whole body. (Sending on until the answer is seen measured the
    // client's reaction time too: the server keeps reading and dropping after it answers, by design,
    // so on a busy machine the client wrote tens of MiB more before it noticed.)
    const bound = 52_428_800 + 16 * MiB;
    const streamed = await rawUpload(server.port, { 'Transfer-Encoding': 'chunked' }, bound);
    expect(streamed.response).toMatch(/^HTTP\/1\.1 400/);
    expect(streamed.response).toContain('"code":4003');
    const rss =
      Number(/VmHWM:\s+(\d+) kB/.exec(readFileSync(`/proc/${server.proc.pid}/status`, 'utf8'))?.[1]) * 1024;
    expect(rss).toBeLessThan(1024 * MiB);
  }, 120_000);
});

/** POSTs a JPEG-looking body over a raw socket, sending up to `limit` bytes until the server answers. */
function rawUpload(port: number, headers: Record<string, string>, limit: number) {
  return new Promise<{ response: string; sent: number }>((resolve, reject) => {
    const socket = connect(port, '127.0.0.1');
    const chunked = headers['Transfer-Encoding'] === 'chunked';
    const head = ['POST /api/public/detect HTTP/1.1', 'Host: 127.0.0.1', 'Content-Type: image/jpeg']
      .concat(Object.entries(headers).map(([k, v]) => `${k}: ${v}`))
      .join('\r\n');
    const chunk = Buffer.alloc(1024 * 1024, 0xff);
    let sent = 0;
    let response = '';
    let answered = false;
    socket.on('data', (data) => {
      response += data.toString('latin1');
      answered = true;
    });
    socket.on('error', () => resolve({ response, sent })); // reset by the server after answering
    socket.on('close', () => resolve({ response, sent }));
    socket.setTimeout(60_000, () => reject(new Error(`no answer after ${sent} bytes`)));
    socket.write(`${head}\r\n\r\n`);
    const pump = () => {
      while (!answered && sent < limit) {
        const frame = chunked
          ? Buffer.concat([Buffer.from(`${chunk.length.toString(16)}\r\n`), chunk, Buffer.from('\r\n')])
          : chunk;
        sent += chunk.length;
        if (!socket.write(frame)) return void socket.once('drain', pump);
      }
    };
    pump();
  });
}
