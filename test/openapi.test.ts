// The published contract: /openapi.json is a well-formed OpenAPI 3.1 document that covers every public
// route, request way, header, response and error code, and it is built from the routes themselves.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ERRORS } from '../lib/common/errors.ts';
import { embeddedApp } from './support/embedded-app.ts';

// biome-ignore lint/suspicious/noExplicitAny: the document is untyped JSON, walked by path.
type Json = Record<string, any>;

let app: Awaited<ReturnType<typeof embeddedApp>>['app'];
let doc: Json;

beforeAll(async () => {
  ({ app } = await embeddedApp());
  const response = await app.inject({ method: 'GET', url: '/openapi.json' });
  expect(response.statusCode).toBe(200);
  expect(response.headers['content-type']).toMatch(/^application\/json/);
  doc = response.json();
});
afterAll(() => app.close());

const PUBLIC_OPERATIONS = [
  ['post', '/api/public/detect'],
  ['post', '/api/open/detect'],
  ['get', '/api/public/health'],
  ['get', '/docs/skill.md'],
  ['get', '/skill/SKILL.md'],
  ['get', '/skill/nsfwdetector.py'],
] as const;

const op = (method: string, path: string): Json => doc.paths?.[path]?.[method];
const deref = (value: Json): Json =>
  typeof value?.$ref === 'string'
    ? value.$ref
        .slice(2)
        .split('/')
        .reduce((node: Json, key: string) => node[key], doc)
    : value;

describe('GET /openapi.json', () => {
  it('is an OpenAPI 3.1 document with info and paths', () => {
    expect(doc.openapi).toMatch(/^3\.1\.\d+$/);
    expect(doc.info).toMatchObject({ title: 'nsfwdetector', version: expect.any(String) });
    expect(Object.keys(doc.paths).length).toBeGreaterThan(0);
    for (const [path, item] of Object.entries<Json>(doc.paths)) {
      expect(path.startsWith('/')).toBe(true);
      for (const operation of Object.values<Json>(item)) {
        expect(Object.keys(operation.responses ?? {}).length, path).toBeGreaterThan(0);
        for (const response of Object.values<Json>(operation.responses)) {
          expect(typeof deref(response).description, path).toBe('string');
        }
      }
    }
    // Every $ref resolves inside the document.
    const refs = JSON.stringify(doc).match(/"\$ref":"[^"]+"/g) ?? [];
    for (const ref of refs) expect(deref(JSON.parse(`{${ref}}`)), ref).toBeDefined();
  });

  it('lists every public route and no internal one', () => {
    for (const [method, path] of PUBLIC_OPERATIONS)
      expect(op(method, path), `${method} ${path}`).toBeDefined();
    const paths = Object.keys(doc.paths);
    expect(paths.filter((p) => p.startsWith('/internal') || p.startsWith('/ext_authz'))).toEqual([]);
    // The plumbing (this document, the reference page and its assets) is not an endpoint of the service.
    expect(paths.filter((p) => p === '/openapi.json' || p.startsWith('/docs/api'))).toEqual([]);
    // The page lists tags in declared order: the three endpoints people come for before the rest.
    expect(doc.tags.map((t: Json) => t.name)).toEqual(['detect', 'health', 'skill']);
    // So are the paths, for any other renderer.
    expect(paths.slice(0, 3)).toEqual(['/api/public/detect', '/api/open/detect', '/api/public/health']);
  });

  it('documents both request ways of the detect endpoints', () => {
    for (const path of ['/api/public/detect', '/api/open/detect']) {
      const content = op('post', path).requestBody.content;
      expect(content['multipart/form-data'].schema).toMatchObject({
        required: ['file'],
        properties: { file: { type: 'string', format: 'binary' } },
      });
      for (const type of ['image/jpeg', 'image/png', 'image/webp', 'image/bmp', 'image/tiff', 'image/gif']) {
        expect(content[type]?.schema, `${path} ${type}`).toMatchObject({ type: 'string', format: 'binary' });
      }
    }
  });

  it('documents the request and response headers of the spec', () => {
    const headerNames = (operation: Json) =>
      (operation.parameters ?? [])
        .filter((p: Json) => p.in === 'header')
        .map((p: Json) => p.name.toLowerCase());
    expect(headerNames(op('post', '/api/public/detect'))).toContain('x-device-id');
    expect(headerNames(op('post', '/api/open/detect'))).toContain('x-device-id');
    // OpenAPI describes `Authorization` as a security scheme, never as a header parameter.
    expect(op('post', '/api/open/detect').security).toEqual([{ apiKey: [] }]);
    expect(doc.components.securitySchemes.apiKey).toMatchObject({ type: 'http', scheme: 'bearer' });
    for (const path of ['/api/public/detect', '/api/open/detect']) {
      const responses = op('post', path).responses;
      const ok = Object.keys(responses['200'].headers ?? {}).map((h) => h.toLowerCase());
      expect(ok).toEqual(
        expect.arrayContaining([
          'x-ratelimit-limit',
          'x-ratelimit-remaining',
          'x-ratelimit-reset',
          'x-quota-tier',
        ]),
      );
      expect(Object.keys(responses['429'].headers ?? {}).map((h) => h.toLowerCase())).toContain(
        'retry-after',
      );
      expect(Object.keys(responses['503'].headers ?? {}).map((h) => h.toLowerCase())).toContain(
        'retry-after',
      );
    }
    const notAllowed = deref(doc.components.responses.MethodNotAllowed);
    expect(Object.keys(notAllowed.headers).map((h) => h.toLowerCase())).toContain('allow');
  });

  it('documents every code of lib/common/errors.ts with its status', () => {
    // Where each status/code pair appears: an operation's response or a shared response.
    const documented = new Set<string>();
    const collect = (status: string, response: Json) => {
      const resolved = deref(response);
      for (const media of Object.values<Json>(resolved.content ?? {})) {
        for (const code of media.schema?.properties?.code?.enum ?? []) documented.add(`${status}/${code}`);
      }
    };
    for (const item of Object.values<Json>(doc.paths)) {
      for (const operation of Object.values<Json>(item)) {
        for (const [status, response] of Object.entries<Json>(operation.responses)) collect(status, response);
      }
    }
    for (const response of Object.values<Json>(doc.components.responses)) {
      const status = Object.values(ERRORS).find((e) =>
        deref(response).description.includes(String(e.code)),
      )?.status;
      if (status) collect(String(status), response);
    }
    const expected = Object.values(ERRORS).map((e) => `${e.status}/${e.code}`);
    expect([...documented].sort()).toEqual(expect.arrayContaining(expected));
    // And the detect endpoints carry every detection failure of spec part 7.
    const open = op('post', '/api/open/detect').responses;
    const codes = (status: string) => open[status].content['application/json'].schema.properties.code.enum;
    expect(codes('400')).toEqual([4001, 4002, 4003, 4004, 4005]);
    expect(codes('401')).toEqual([4011]);
    expect(codes('429')).toEqual([4290, 4291]);
    expect(codes('503')).toEqual([5001]);
  });

  it('shows an example of every answer of the public endpoints, errors with their envelope', () => {
    for (const [method, path] of PUBLIC_OPERATIONS.slice(0, 3)) {
      for (const [status, response] of Object.entries<Json>(op(method, path).responses)) {
        const media = response.content['application/json'];
        const examples = media.examples
          ? Object.values<Json>(media.examples).map((e) => e.value)
          : [media.example];
        expect(examples.length, `${path} ${status}`).toBeGreaterThan(0);
        const codes = examples.map((e) => e?.code);
        if (status === '200') {
          expect(examples[0], path).toMatchObject({ code: 0, message: 'ok', data: expect.any(Object) });
        } else {
          expect(codes, `${path} ${status}`).toEqual(media.schema.properties.code.enum);
          for (const e of examples) expect(Object.keys(e).sort()).toEqual(['code', 'message']);
        }
      }
    }
  });

  it('is built from the route schemas: the detection result is the one responses are serialized with', async () => {
    const { detectionResponseSchema } = await import('../services/detect/result.ts');
    const published = op('post', '/api/public/detect').responses['200'].content['application/json'].schema;
    expect(published.properties.data.required).toEqual(detectionResponseSchema.properties.data.required);
    expect(Object.keys(published.properties.data.properties)).toEqual(
      Object.keys(detectionResponseSchema.properties.data.properties),
    );
  });
});

describe('GET /docs/api', () => {
  it('serves the Swagger UI page and its assets from this origin under a strict CSP', async () => {
    const page = await app.inject({ method: 'GET', url: '/docs/api' });
    expect(page.statusCode).toBe(200);
    expect(page.headers['content-type']).toMatch(/^text\/html/);
    const csp = String(page.headers['content-security-policy']);
    expect(csp).toContain("script-src 'self'");
    expect(csp).not.toMatch(/https?:|unsafe-inline/);
    expect(page.headers['x-content-type-options']).toBe('nosniff');
    const assets = [...page.body.matchAll(/(?:src|href)="([^"]+)"/g)].map((m) => m[1] ?? '');
    expect(assets).toContain('/docs/api/static/swagger-ui-bundle.js');
    for (const url of assets) {
      expect(url).toMatch(/^\/docs\/api\/static\//);
      const asset = await app.inject({ method: 'GET', url });
      expect(asset.statusCode, url).toBe(200);
      expect(asset.headers['content-security-policy'], url).toBe(csp);
    }
    // The page renders the same document as /openapi.json.
    const rendered = await app.inject({ method: 'GET', url: '/docs/api/json' });
    expect(rendered.json()).toEqual(doc);
  });
});
