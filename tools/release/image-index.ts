// The release's multi-arch image: one manifest list under the release's tag naming the linux/amd64 and
// linux/arm64 images (each pushed by docker under a tag of its own), so that a node pulls its own
// architecture's image by the one reference. docker's manifest list type, as the images' own manifests
// are docker's (the local daemon's push). Plain HTTP (the local registry on loopback).
// usage: tsx tools/release/image-index.ts REGISTRY REPOSITORY TAG AMD64_DIGEST ARM64_DIGEST
// Prints the list's digest.

import { createHash } from 'node:crypto';
import { fileURLToPath } from 'node:url';

export const MANIFEST_LIST = 'application/vnd.docker.distribution.manifest.list.v2+json';
const IMAGE_MANIFESTS =
  'application/vnd.docker.distribution.manifest.v2+json, application/vnd.oci.image.manifest.v1+json';

export interface Platform {
  os: string;
  architecture: string;
  variant?: string;
}

async function ok(what: string, r: Response): Promise<Response> {
  if (!r.ok) throw new Error(`${what}: HTTP ${r.status} ${await r.text()}`);
  return r;
}

/** The descriptor of the image `digest`, its platform read from its config (what the image claims). */
async function platformDescriptor(base: string, digest: string) {
  const r = await ok(
    `image ${digest}`,
    await fetch(`${base}/manifests/${digest}`, { headers: { accept: IMAGE_MANIFESTS } }),
  );
  const body = Buffer.from(await r.arrayBuffer());
  const manifest = JSON.parse(body.toString()) as { config: { digest: string } };
  const config = (await (
    await ok('config', await fetch(`${base}/blobs/${manifest.config.digest}`))
  ).json()) as Platform & { os: string };
  const platform: Platform = { architecture: config.architecture, os: config.os };
  if (config.architecture === 'arm64') platform.variant = config.variant ?? 'v8';
  return { mediaType: r.headers.get('content-type') ?? '', digest, size: body.length, platform };
}

/** Puts the list of `digests` under `tag`; resolves with its digest. Each image must be of another platform. */
export async function pushIndex(
  registry: string,
  repository: string,
  tag: string,
  digests: string[],
): Promise<string> {
  const base = `http://${registry}/v2/${repository}`;
  const manifests = await Promise.all(digests.map((d) => platformDescriptor(base, d)));
  const platforms = manifests.map((m) => `${m.platform.os}/${m.platform.architecture}`);
  if (new Set(platforms).size !== platforms.length)
    throw new Error(`the images are not one per platform: ${platforms.join(', ')}`);
  const body = Buffer.from(JSON.stringify({ schemaVersion: 2, mediaType: MANIFEST_LIST, manifests }));
  await ok(
    `manifest list ${tag}`,
    await fetch(`${base}/manifests/${tag}`, {
      method: 'PUT',
      body: new Uint8Array(body),
      headers: { 'content-type': MANIFEST_LIST },
    }),
  );
  return `sha256:${createHash('sha256').update(body).digest('hex')}`;
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const [registry, repository, tag, ...digests] = process.argv.slice(2);
  if (!registry || !repository || !tag || digests.length < 2)
    throw new Error('usage: image-index.ts REGISTRY REPOSITORY TAG AMD64_DIGEST ARM64_DIGEST');
  console.log(await pushIndex(registry, repository, tag, digests));
}
