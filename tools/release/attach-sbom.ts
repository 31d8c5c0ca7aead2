// Attaches an SBOM (CycloneDX JSON) to an image in an OCI registry as an OCI 1.1 artifact whose
// `subject` is the image, so that scanners following the image's referrers find it. A registry without
// the referrers API (distribution's, which the local node runs) gets the OCI distribution spec's
// fallback: an image index of the referrers under the tag `sha256-<hex>`. Plain HTTP (loopback).
// usage: tsx tools/release/attach-sbom.ts REGISTRY REPOSITORY IMAGE_DIGEST SBOM_FILE
// Prints the artifact's digest once the image's referrers list it.

import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

export const SBOM_TYPE = 'application/vnd.cyclonedx+json';
const EMPTY_TYPE = 'application/vnd.oci.empty.v1+json';
const MANIFEST_TYPE = 'application/vnd.oci.image.manifest.v1+json';
const INDEX_TYPE = 'application/vnd.oci.image.index.v1+json';
const MANIFEST_TYPES = [
  MANIFEST_TYPE,
  INDEX_TYPE,
  'application/vnd.docker.distribution.manifest.v2+json',
  'application/vnd.docker.distribution.manifest.list.v2+json',
].join(', ');

const sha256 = (b: Buffer) => `sha256:${createHash('sha256').update(b).digest('hex')}`;

export interface Descriptor {
  mediaType: string;
  digest: string;
  size: number;
  artifactType?: string;
  annotations?: Record<string, string>;
}

async function ok(what: string, r: Response): Promise<Response> {
  if (!r.ok) throw new Error(`${what}: HTTP ${r.status} ${await r.text()}`);
  return r;
}

async function pushBlob(base: string, body: Buffer): Promise<string> {
  const digest = sha256(body);
  const start = await ok('blob upload', await fetch(`${base}/blobs/uploads/`, { method: 'POST' }));
  const location = new URL(start.headers.get('location') ?? '', base);
  location.searchParams.set('digest', digest);
  await ok(
    'blob put',
    await fetch(location, {
      method: 'PUT',
      body: new Uint8Array(body),
      headers: { 'content-type': 'application/octet-stream' },
    }),
  );
  return digest;
}

async function putManifest(base: string, reference: string, mediaType: string, body: Buffer): Promise<void> {
  await ok(
    `manifest ${reference}`,
    await fetch(`${base}/manifests/${reference}`, {
      method: 'PUT',
      body: new Uint8Array(body),
      headers: { 'content-type': mediaType },
    }),
  );
}

/** The referrers tag schema's tag of a digest (for registries without the referrers API). */
export const referrersTag = (digest: string) => digest.replace(':', '-');

/** The referrers of `subject` in the repository at `base`: the registry's API, or the tagged index. */
export async function referrersOf(base: string, subject: string): Promise<Descriptor[]> {
  const api = await fetch(`${base}/referrers/${subject}`);
  if (api.ok) return ((await api.json()) as { manifests?: Descriptor[] }).manifests ?? [];
  const tagged = await fetch(`${base}/manifests/${referrersTag(subject)}`, {
    headers: { accept: INDEX_TYPE },
  });
  if (tagged.status === 404) return [];
  return (
    ((await (await ok('the referrers index', tagged)).json()) as { manifests?: Descriptor[] }).manifests ?? []
  );
}

/** `referrer` in the tagged referrers index of `subject` (a registry with the API lists it itself). */
async function addReferrer(base: string, subject: string, referrer: Descriptor): Promise<void> {
  if ((await fetch(`${base}/referrers/${subject}`)).ok) return;
  const manifests = (await referrersOf(base, subject)).filter((m) => m.digest !== referrer.digest);
  const index = { schemaVersion: 2, mediaType: INDEX_TYPE, manifests: [...manifests, referrer] };
  await putManifest(base, referrersTag(subject), INDEX_TYPE, Buffer.from(JSON.stringify(index)));
}

/** Pushes `sbom` as an artifact whose subject is the image `imageDigest`; resolves with its digest. */
export async function attachSbom(
  registry: string,
  repository: string,
  imageDigest: string,
  sbom: Buffer,
): Promise<string> {
  const base = `http://${registry}/v2/${repository}`;
  const head = await ok(
    'the image',
    await fetch(`${base}/manifests/${imageDigest}`, { method: 'HEAD', headers: { accept: MANIFEST_TYPES } }),
  );
  const subject = {
    mediaType: head.headers.get('content-type') ?? '',
    digest: imageDigest,
    size: Number(head.headers.get('content-length')),
  };
  const empty = Buffer.from('{}');
  const manifest = Buffer.from(
    JSON.stringify({
      schemaVersion: 2,
      mediaType: MANIFEST_TYPE,
      artifactType: SBOM_TYPE,
      config: { mediaType: EMPTY_TYPE, digest: await pushBlob(base, empty), size: empty.length },
      layers: [
        {
          mediaType: SBOM_TYPE,
          digest: await pushBlob(base, sbom),
          size: sbom.length,
          annotations: { 'org.opencontainers.image.title': 'sbom.cdx.json' },
        },
      ],
      subject,
    }),
  );
  const digest = sha256(manifest);
  await putManifest(base, digest, MANIFEST_TYPE, manifest);
  await addReferrer(base, imageDigest, {
    mediaType: MANIFEST_TYPE,
    digest,
    size: manifest.length,
    artifactType: SBOM_TYPE,
  });
  if (
    !(await referrersOf(base, imageDigest)).some((m) => m.digest === digest && m.artifactType === SBOM_TYPE)
  )
    throw new Error(`the referrers of ${imageDigest} do not list the SBOM ${digest}`);
  return digest;
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const [registry, repository, digest, file] = process.argv.slice(2);
  if (!registry || !repository || !digest || !file)
    throw new Error('usage: attach-sbom.ts REGISTRY REPOSITORY IMAGE_DIGEST SBOM_FILE');
  console.log(await attachSbom(registry, repository, digest, readFileSync(file)));
}
