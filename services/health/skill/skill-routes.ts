// The companion client's documents (spec part 1): the human page /docs/skill.md and the install files
// /skill/SKILL.md and /skill/nsfwdetector.py. They are read once, at registration, and served with the
// base URL of the request substituted:
//   - in the two Markdown files, every `{{BASE_URL}}`;
//   - in nsfwdetector.py, only the one marker line `DEFAULT_BASE_URL = "..."  # replaced when served`,
//     so the downloaded client talks to the service it came from. Every other byte is served as-is.
// The base URL is `request.protocol` + `request.host`, which follow X-Forwarded-Proto/Host only as far
// as Fastify's trustProxy setting allows. A Host that is not a plain host[:port] is refused (4001), so
// nothing a client sends can be injected into the served Python source.

import { readFileSync } from 'node:fs';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { sendError } from '../../../lib/common/envelope.ts';
import { ApiError } from '../../../lib/common/errors.ts';
import { documentSchema } from '../schemas.ts';
import { CLI_PATH } from './skill-version.ts';

const PLACEHOLDER = '{{BASE_URL}}';
const MARKER = /^DEFAULT_BASE_URL = "[^"\n]*"( {2}# replaced when served)$/m;

/** host, IPv4 or [IPv6], with an optional port: the only shapes substituted into the documents. */
const HOST =
  /^(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*|\[[0-9A-Fa-f:.]{2,45}\])(?::\d{1,5})?$/;

export interface SkillDocuments {
  humanDocs: string;
  skillMd: string;
  cli: string;
}

export function loadSkillDocuments(): SkillDocuments {
  const read = (name: string) => readFileSync(new URL(`./${name}`, import.meta.url), 'utf8');
  const cli = readFileSync(CLI_PATH, 'utf8');
  if (!MARKER.test(cli)) throw new Error('nsfwdetector.py has no DEFAULT_BASE_URL marker line');
  return { humanDocs: read('skill.md'), skillMd: read('SKILL.md'), cli };
}

/** The base URL of a request, or undefined when its Host is not a plain host[:port]. */
export function requestBaseUrl(request: FastifyRequest): string | undefined {
  const protocol = request.protocol === 'https' ? 'https' : 'http';
  const host = request.host;
  if (typeof host !== 'string' || !HOST.test(host)) return undefined;
  return `${protocol}://${host}`;
}

export function renderMarkdown(template: string, baseUrl: string): string {
  return template.split(PLACEHOLDER).join(baseUrl);
}

export function renderCli(source: string, baseUrl: string): string {
  return source.replace(MARKER, (_line, comment: string) => `DEFAULT_BASE_URL = "${baseUrl}"${comment}`);
}

const TYPES = {
  markdown: 'text/markdown; charset=utf-8',
  python: 'text/x-python; charset=utf-8',
} as const;

export default async function skillRoutes(app: FastifyInstance): Promise<void> {
  const docs = loadSkillDocuments();

  const serve =
    (render: (baseUrl: string) => string, type: string) =>
    async (request: FastifyRequest, reply: FastifyReply) => {
      const baseUrl = requestBaseUrl(request);
      if (!baseUrl) return sendError(reply, new ApiError('BAD_REQUEST', 'Invalid Host header'));
      return reply
        .type(type)
        .header('cache-control', 'public, max-age=300')
        .header('vary', 'Host, X-Forwarded-Host, X-Forwarded-Proto')
        .header('x-content-type-options', 'nosniff')
        .send(render(baseUrl));
    };

  app.get(
    '/docs/skill.md',
    { schema: documentSchema("The companion client's guide for people (Markdown)", TYPES.markdown) },
    serve((base) => renderMarkdown(docs.humanDocs, base), TYPES.markdown),
  );
  app.get(
    '/skill/SKILL.md',
    { schema: documentSchema("The companion client's skill file for agents (Markdown)", TYPES.markdown) },
    serve((base) => renderMarkdown(docs.skillMd, base), TYPES.markdown),
  );
  app.get(
    '/skill/nsfwdetector.py',
    { schema: documentSchema('The companion client (Python), talking to this service', TYPES.python) },
    serve((base) => renderCli(docs.cli, base), TYPES.python),
  );
}
