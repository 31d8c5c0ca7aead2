// The release check's tampered image: the released image with one layer more (a file no build put
// there), its config's diff_ids to match, pushed under the release's tag, so that a verification by
// tag must find no signature for what the tag now names. When the tag names a multi-arch list, its
// linux/arm64 image is the one changed, and the list naming it instead is pushed under the tag.
// `--restore DIGEST` points the tag back at the released manifest. Plain HTTP (the local registry on
// loopback).
// usage: tsx tools/release/tamper.ts REGISTRY REPOSITORY TAG [--restore DIGEST]
// Prints the digest the tag names afterwards.

import { createHash } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { gzipSync } from 'node:zlib';

const DOCKER_MANIFEST = 'application/vnd.docker.distribution.manifest.v2+json';
const OCI_MANIFEST = 'application/vnd.oci.image.manifest.v1+json';
const LISTS = [
  'application/vnd.docker.distribution.manifest.list.v2+json',
  'application/vnd.oci.image.index.v1+json',
];
const sha256 = (b: Buffer) => `sha256:${createHash('sha256').update(b).digest('hex')}`;

async function ok(what: string, r: Response): Promise<Response> {
  if (!r.ok) throw new Error(`${what}: HTTP ${r.status} ${await r.text()}`);
  return r;
}

/** A tar archive holding one small file (POSIX ustar, one 512-byte header, the data, two zero blocks). */
export function oneFileTar(name: string, data: Buffer): Buffer {
  const header = Buffer.alloc(512);
  header.write(name, 0, 'utf8');
  header.write('0000644\0', 100);
  header.write('0000000\0', 108);
  header.write('0000000\0', 116);
  header.write(`${data.length.toString(8).padStart(11, '0')}\0`, 124);
  header.write('00000000000\0', 136);
  header.write('        ', 148);
  header.write('0', 156);
  header.write('ustar\0', 257);
  header.write('00', 263);
  let sum = 0;
  for (const b of header) sum += b;
  header.write(`${sum.toString(8).padStart(6, '0')}\0 `, 148);
  const padded = Buffer.alloc(Math.ceil(data.length / 512) * 512);
  data.copy(padded);
  return Buffer.concat([header, padded, Buffer.alloc(1024)]);
}

async function pushBlob(base: string, body: Buffer): Promise<string> {
  const digest = sha256(body);
  const start = await ok('blob upload', await fetch(`${base}/blobs/uploads/`, { method: 'POST' }));
  const at = new URL(start.headers.get('location') ?? '', base);
  at.searchParams.set('digest', digest);
  await ok('blob put', await fetch(at, { method: 'PUT', body: new Uint8Array(body) }));
  return digest;
}

async function putManifest(base: string, tag: string, mediaType: string, body: Buffer): Promise<string> {
  const r = await ok(
    `manifest ${tag}`,
    await fetch(`${base}/manifests/${tag}`, {
      method: 'PUT',
      body: new Uint8Array(body),
      headers: { 'content-type': mediaType },
    }),
  );
  return r.headers.get('docker-content-digest') ?? sha256(body);
}

async function getManifest(base: string, reference: string): Promise<{ mediaType: string; body: Buffer }> {
  const r = await ok(
    `manifest ${reference}`,
    await fetch(`${base}/manifests/${reference}`, {
      headers: { accept: [DOCKER_MANIFEST, OCI_MANIFEST, ...LISTS].join(', ') },
    }),
  );
  return {
    mediaType: r.headers.get('content-type') ?? DOCKER_MANIFEST,
    body: Buffer.from(await r.arrayBuffer()),
  };
}

/** The image under `tag` with one layer more (a list's arm64 image), pushed under `tag`; resolves with
 * the digest the tag names then. */
export async function tamper(registry: string, repository: string, tag: string): Promise<string> {
  const base = `http://${registry}/v2/${repository}`;
  const named = await getManifest(base, tag);
  if (!LISTS.includes(named.mediaType)) return tamperImage(base, named, tag);
  const list = JSON.parse(named.body.toString()) as {
    manifests: Array<{ digest: string; size: number; platform?: { architecture?: string } }>;
  };
  const entry = list.manifests.find((m) => m.platform?.architecture === 'arm64') ?? list.manifests[0];
  if (!entry) throw new Error(`the list under ${tag} names no image`);
  const image = await getManifest(base, entry.digest);
  const changed = await tamperImage(base, image);
  entry.size = (await getManifest(base, changed)).body.length;
  entry.digest = changed;
  return putManifest(base, tag, named.mediaType, Buffer.from(JSON.stringify(list)));
}

/** The image `manifest` with one layer more, pushed under `tag` or, without one, by its digest. */
async function tamperImage(
  base: string,
  { mediaType, body }: { mediaType: string; body: Buffer },
  tag?: string,
): Promise<string> {
  const manifest = JSON.parse(body.toString());
  const config = JSON.parse(
    Buffer.from(
      await (await ok('config', await fetch(`${base}/blobs/${manifest.config.digest}`))).arrayBuffer(),
    ).toString(),
  );
  const tar = oneFileTar('tampered', Buffer.from('not built by the release\n'));
  const layer = gzipSync(tar);
  config.rootfs.diff_ids.push(sha256(tar));
  const configBody = Buffer.from(JSON.stringify(config));
  manifest.config = { ...manifest.config, digest: await pushBlob(base, configBody), size: configBody.length };
  const layerType =
    mediaType === OCI_MANIFEST
      ? 'application/vnd.oci.image.layer.v1.tar+gzip'
      : 'application/vnd.docker.image.rootfs.diff.tar.gzip';
  manifest.layers.push({ mediaType: layerType, digest: await pushBlob(base, layer), size: layer.length });
  const changed = Buffer.from(JSON.stringify(manifest));
  return putManifest(base, tag ?? sha256(changed), mediaType, changed);
}

/** `tag` pointed back at the manifest `digest`. */
export async function restore(
  registry: string,
  repository: string,
  tag: string,
  digest: string,
): Promise<string> {
  const base = `http://${registry}/v2/${repository}`;
  const { mediaType, body } = await getManifest(base, digest);
  return putManifest(base, tag, mediaType, body);
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const [registry, repository, tag, flag, digest] = process.argv.slice(2);
  if (!registry || !repository || !tag)
    throw new Error('usage: tamper.ts REGISTRY REPOSITORY TAG [--restore DIGEST]');
  console.log(
    flag === '--restore' && digest
      ? await restore(registry, repository, tag, digest)
      : await tamper(registry, repository, tag),
  );
}
