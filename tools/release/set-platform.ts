// Sets the platform an image in the registry claims (its config's os, architecture and variant), pushed
// again under its tag. The release's arm64 image needs it: the daemon's legacy builder and `docker
// import` (there is no buildx here) label every image with the daemon's own platform, linux/amd64,
// whatever its binaries are. Plain HTTP (the local registry on loopback).
// usage: tsx tools/release/set-platform.ts REGISTRY REPOSITORY TAG OS/ARCHITECTURE[/VARIANT]
// Prints the manifest's new digest.

import { createHash } from 'node:crypto';
import { fileURLToPath } from 'node:url';

const IMAGE_MANIFESTS =
  'application/vnd.docker.distribution.manifest.v2+json, application/vnd.oci.image.manifest.v1+json';
const sha256 = (b: Buffer) => `sha256:${createHash('sha256').update(b).digest('hex')}`;

async function ok(what: string, r: Response): Promise<Response> {
  if (!r.ok) throw new Error(`${what}: HTTP ${r.status} ${await r.text()}`);
  return r;
}

export async function setPlatform(
  registry: string,
  repository: string,
  tag: string,
  platform: string,
): Promise<string> {
  const [os, architecture, variant] = platform.split('/');
  if (!os || !architecture) throw new Error(`not a platform: ${platform}`);
  const base = `http://${registry}/v2/${repository}`;
  const got = await ok(
    `manifest ${tag}`,
    await fetch(`${base}/manifests/${tag}`, { headers: { accept: IMAGE_MANIFESTS } }),
  );
  const mediaType = got.headers.get('content-type') ?? '';
  const manifest = (await got.json()) as { config: { digest: string; size: number } };
  const config = (await (
    await ok('config', await fetch(`${base}/blobs/${manifest.config.digest}`))
  ).json()) as Record<string, unknown>;
  Object.assign(config, { os, architecture });
  if (variant) config.variant = variant;
  else delete config.variant;
  const configBody = Buffer.from(JSON.stringify(config));
  const digest = sha256(configBody);
  const start = await ok('blob upload', await fetch(`${base}/blobs/uploads/`, { method: 'POST' }));
  const at = new URL(start.headers.get('location') ?? '', base);
  at.searchParams.set('digest', digest);
  await ok('blob put', await fetch(at, { method: 'PUT', body: new Uint8Array(configBody) }));
  manifest.config = { ...manifest.config, digest, size: configBody.length };
  const body = Buffer.from(JSON.stringify(manifest));
  await ok(
    `manifest ${tag}`,
    await fetch(`${base}/manifests/${tag}`, {
      method: 'PUT',
      body: new Uint8Array(body),
      headers: { 'content-type': mediaType },
    }),
  );
  return sha256(body);
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const [registry, repository, tag, platform] = process.argv.slice(2);
  if (!registry || !repository || !tag || !platform)
    throw new Error('usage: set-platform.ts REGISTRY REPOSITORY TAG OS/ARCHITECTURE[/VARIANT]');
  console.log(await setPlatform(registry, repository, tag, platform));
}
