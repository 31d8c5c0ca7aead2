// The companion client's documents (spec part 1) through Fastify inject: content types, base-URL
// substitution, the one rewritten line of nsfwdetector.py, and the single source of skill_version.

import { readFileSync } from 'node:fs';
import Fastify, { type FastifyInstance } from 'fastify';
import { afterEach, describe, expect, it } from 'vitest';
import { installEnvelopeHandlers } from '../../../lib/common/envelope.ts';
import healthApp from '../app.ts';
import skillRoutes, { renderCli } from './skill-routes.ts';
import { CLI_PATH, SKILL_VERSION } from './skill-version.ts';

const CLI_SOURCE = readFileSync(CLI_PATH, 'utf8');
const MARKER_LINE = /^DEFAULT_BASE_URL = .*$/m;

let app: FastifyInstance | undefined;

async function start(trustProxy: boolean | string = false, withHealth = false): Promise<FastifyInstance> {
  app = Fastify({ logger: false, trustProxy });
  installEnvelopeHandlers(app);
  await app.register(withHealth ? healthApp : skillRoutes);
  await app.ready();
  return app;
}

afterEach(async () => {
  await app?.close();
  app = undefined;
});

function lines(text: string): string[] {
  return text.split('\n');
}

describe('GET /docs/skill.md', () => {
  it('is markdown with the request base URL substituted', async () => {
    const server = await start();
    const res = await server.inject({ url: '/docs/skill.md', headers: { host: 'moderation.example:8443' } });
    expect(res.statusCode).toBe(200);
    expect(res.headers['content-type']).toBe('text/markdown; charset=utf-8');
    expect(res.body).not.toContain('{{BASE_URL}}');
    expect(res.body).toContain(
      'curl -fsS http://moderation.example:8443/skill/nsfwdetector.py -o nsfwdetector.py',
    );
    expect(res.body).toMatch(/not stored|stores no image/);
  });

  it('answers HEAD too', async () => {
    const server = await start();
    const res = await server.inject({ method: 'HEAD', url: '/docs/skill.md' });
    expect(res.statusCode).toBe(200);
    expect(res.headers['content-type']).toBe('text/markdown; charset=utf-8');
  });
});

describe('GET /skill/SKILL.md', () => {
  it('is an agent skill: front matter with name and description, base URL substituted', async () => {
    const server = await start();
    const res = await server.inject({ url: '/skill/SKILL.md', headers: { host: 'localhost:9999' } });
    expect(res.statusCode).toBe(200);
    expect(res.headers['content-type']).toBe('text/markdown; charset=utf-8');
    const [first, ...rest] = lines(res.body);
    expect(first).toBe('---');
    const end = rest.indexOf('---');
    expect(end).toBeGreaterThan(0);
    const front = Object.fromEntries(
      rest
        .slice(0, end)
        .map((line) => [line.slice(0, line.indexOf(':')), line.slice(line.indexOf(':') + 1).trim()]),
    );
    expect(front.name).toBe('nsfwdetector');
    expect(front.description?.length).toBeGreaterThan(40);
    expect(res.body).not.toContain('{{BASE_URL}}');
    expect(res.body).toContain('curl -fsS http://localhost:9999/skill/nsfwdetector.py');
    expect(res.body).toMatch(/never "safe"/);
  });
});

describe('GET /skill/nsfwdetector.py', () => {
  it('is the published client with only the DEFAULT_BASE_URL line rewritten', async () => {
    const server = await start();
    const res = await server.inject({ url: '/skill/nsfwdetector.py', headers: { host: '10.0.0.7:8080' } });
    expect(res.statusCode).toBe(200);
    expect(res.headers['content-type']).toBe('text/x-python; charset=utf-8');
    const served = lines(res.body);
    const source = lines(CLI_SOURCE);
    expect(served.length).toBe(source.length);
    const differing = served.flatMap((line, i) => (line === source[i] ? [] : [line]));
    expect(differing).toEqual(['DEFAULT_BASE_URL = "http://10.0.0.7:8080"  # replaced when served']);
    expect(res.body).toContain(`__version__ = "${SKILL_VERSION}"`);
  });

  it('ignores X-Forwarded-* without trustProxy', async () => {
    const server = await start(false);
    const res = await server.inject({
      url: '/skill/nsfwdetector.py',
      headers: { host: 'internal:8080', 'x-forwarded-proto': 'https', 'x-forwarded-host': 'evil.example' },
    });
    expect(res.body.match(MARKER_LINE)?.[0]).toBe(
      'DEFAULT_BASE_URL = "http://internal:8080"  # replaced when served',
    );
  });

  it('honours X-Forwarded-Proto/Host when trustProxy allows', async () => {
    const server = await start(true);
    const res = await server.inject({
      url: '/skill/nsfwdetector.py',
      headers: {
        host: 'internal:8080',
        'x-forwarded-proto': 'https',
        'x-forwarded-host': 'nsfw.example.org',
      },
    });
    expect(res.body.match(MARKER_LINE)?.[0]).toBe(
      'DEFAULT_BASE_URL = "https://nsfw.example.org"  # replaced when served',
    );
  });

  it('refuses a Host that could inject code into the served file', async () => {
    const server = await start(true);
    for (const host of ['evil"; import os #', 'a b', 'x/y', 'host:port']) {
      const res = await server.inject({ url: '/skill/nsfwdetector.py', headers: { host } });
      expect(res.statusCode, host).toBe(400);
      expect(res.json()).toMatchObject({ code: 4001 });
    }
    const forwarded = await server.inject({
      url: '/skill/nsfwdetector.py',
      headers: { host: 'ok:1', 'x-forwarded-host': 'x"\nimport os' },
    });
    expect(forwarded.statusCode).toBe(400);
  });

  it('accepts IPv6 literal hosts', async () => {
    const server = await start();
    const res = await server.inject({ url: '/skill/nsfwdetector.py', headers: { host: '[::1]:8080' } });
    expect(res.statusCode).toBe(200);
    expect(res.body.match(MARKER_LINE)?.[0]).toBe(
      'DEFAULT_BASE_URL = "http://[::1]:8080"  # replaced when served',
    );
  });
});

describe('renderCli', () => {
  it('replaces exactly one line', () => {
    const out = renderCli(CLI_SOURCE, 'https://a.example');
    expect(out.length - CLI_SOURCE.length).toBe('https://a.example'.length - 'http://localhost:8080'.length);
  });
});

describe('skill_version', () => {
  it('is served by health, registered with the skill routes, from the __version__ of the CLI', async () => {
    const server = await start(false, true);
    const health = await server.inject({ url: '/api/public/health' });
    const version = /^__version__ = "([^"]+)"/m.exec(CLI_SOURCE)?.[1];
    expect(version).toMatch(/^\d+\.\d+\.\d+$/);
    expect(health.json().data.skill_version).toBe(version);
    const cli = await server.inject({ url: '/skill/nsfwdetector.py' });
    expect(cli.statusCode).toBe(200);
  });
});
