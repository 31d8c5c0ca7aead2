// An SBOM attached to an image (tools/release/attach-sbom.ts) in distribution's registry, the one the
// local node and the release push to: an image pushed, its SBOM attached, found again through the
// image's referrers (the tagged index: this registry has no referrers API), the same SBOM byte for byte;
// attached twice, listed once.

import { createHash } from 'node:crypto';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { attachSbom, referrersOf, SBOM_TYPE } from '../../tools/release/attach-sbom.ts';
import { TOOLS_DIR } from '../../tools/stack/tools.ts';
import { type Child, spawnChild } from '../support/children.ts';
import { eventually } from '../support/eventually.ts';
import { REPO } from '../support/paths.ts';
import { describeWithTool, tool } from '../support/tools.ts';

const REGISTRY_VERSION = /^REGISTRY_VERSION=(\S+)$/m.exec(
  readFileSync(join(REPO, '.ci/kube-versions.sh'), 'utf8'),
)?.[1];
const REGISTRY = tool('registry (distribution)', 'bash .ci/install-tools.sh', {
  path: join(TOOLS_DIR, `registry-${REGISTRY_VERSION}`, 'registry'),
});
const sha256 = (b: Buffer) => `sha256:${createHash('sha256').update(b).digest('hex')}`;

describeWithTool([REGISTRY], 'an SBOM attached to an image in the registry', () => {
  let registry: Child;
  const port = 20_000 + Math.floor(Math.random() * 10_000);
  const base = `http://127.0.0.1:${port}/v2/nsfwdetector`;

  beforeAll(async () => {
    const dir = mkdtempSync(join(tmpdir(), 'registry-'));
    writeFileSync(
      join(dir, 'config.yml'),
      `version: 0.1\nlog: {level: warn}\nstorage:\n  filesystem: {rootdirectory: "${dir}/data"}\nhttp:\n  addr: "127.0.0.1:${port}"\n`,
    );
    registry = spawnChild('registry', REGISTRY.find() as string, ['serve', join(dir, 'config.yml')]);
    await eventually(
      'the registry',
      async () =>
        (await fetch(`http://127.0.0.1:${port}/v2/`).catch(() => undefined))?.ok ? true : undefined,
      30_000,
    );
  });

  afterAll(async () => {
    await registry?.stop();
  });

  /** A minimal image (a config, no layer), pushed by digest; resolves with its digest. */
  async function pushImage(): Promise<string> {
    const config = Buffer.from(
      '{"architecture":"amd64","os":"linux","rootfs":{"type":"layers","diff_ids":[]}}',
    );
    const start = await fetch(`${base}/blobs/uploads/`, { method: 'POST' });
    const at = new URL(start.headers.get('location') ?? '', base);
    at.searchParams.set('digest', sha256(config));
    expect((await fetch(at, { method: 'PUT', body: new Uint8Array(config) })).status).toBe(201);
    const manifest = Buffer.from(
      JSON.stringify({
        schemaVersion: 2,
        mediaType: 'application/vnd.oci.image.manifest.v1+json',
        config: {
          mediaType: 'application/vnd.oci.image.config.v1+json',
          digest: sha256(config),
          size: config.length,
        },
        layers: [],
      }),
    );
    const put = await fetch(`${base}/manifests/0.2.0`, {
      method: 'PUT',
      body: new Uint8Array(manifest),
      headers: { 'content-type': 'application/vnd.oci.image.manifest.v1+json' },
    });
    expect(put.status).toBe(201);
    return sha256(manifest);
  }

  it('the SBOM is among the image referrers, the same bytes, once however often attached', async () => {
    const image = await pushImage();
    expect(await referrersOf(base, image)).toEqual([]);
    const sbom = Buffer.from(JSON.stringify({ bomFormat: 'CycloneDX', specVersion: '1.6', components: [] }));
    const digest = await attachSbom(`127.0.0.1:${port}`, 'nsfwdetector', image, sbom);
    expect(await attachSbom(`127.0.0.1:${port}`, 'nsfwdetector', image, sbom)).toBe(digest);
    const referrers = await referrersOf(base, image);
    expect(referrers.map((r) => [r.digest, r.artifactType])).toEqual([[digest, SBOM_TYPE]]);
    const artifact = await (
      await fetch(`${base}/manifests/${digest}`, {
        headers: { accept: 'application/vnd.oci.image.manifest.v1+json' },
      })
    ).json();
    expect(artifact.subject.digest).toBe(image);
    const layer = Buffer.from(
      await (await fetch(`${base}/blobs/${artifact.layers[0].digest}`)).arrayBuffer(),
    );
    expect(layer.equals(sbom)).toBe(true);
  });
});
