// The detect service as a Fastify plugin: both detect endpoints plus the internal readiness probes.
// The composition root hands it its capabilities (model slot, authorizer, work gate); it never
// chooses implementations itself.

import { randomUUID } from 'node:crypto';
import type { Readable } from 'node:stream';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { Authorizer, Decision, EdgeIdentity, RequestFacts } from '../../lib/common/authorizer.ts';
import { describeOnly } from '../../lib/common/describe-only.ts';
import { ok } from '../../lib/common/envelope.ts';
import { ApiError } from '../../lib/common/errors.ts';
import { headerValue } from '../../lib/common/header-value.ts';
import { registerProbes, unavailable } from '../../lib/common/probes.ts';
import { DETECT_ROUTES } from '../../lib/common/routes.ts';
import { inSpan, recordSpan } from '../../lib/common/telemetry.ts';
import type { HashMatcher } from './hash-lists.ts';
import { decodeMemoryBytes } from './image/decode-memory.ts';
import { probeHeader } from './image/probe.ts';
import { sniffFormat } from './image/sniff.ts';
import type { DimensionLimits } from './image/types.ts';
import { type IntakeLimits, readImage } from './intake.ts';
import { buildResult, type Thresholds } from './result.ts';
import { openDetectSchema, publicDetectSchema } from './schemas.ts';
import type { ScorerSlot } from './scoring/scorer-slot.ts';
import type { Admission, WorkGate } from './work-gate.ts';

export interface DetectOptions {
  model: ScorerSlot;
  authorizer: Authorizer;
  gate: WorkGate;
  /** Read once per request: a policy change applies to the next request, never to one in flight. */
  thresholds: Thresholds | (() => Thresholds);
  intake: IntakeLimits;
  /** The upload limit in force, read once per request (a policy can lower `intake.maxBytes`). */
  maxFileBytes?: () => number;
  limits: DimensionLimits;
  /** Known-bad hash lists the image's PDQ is matched against (none: no matching). */
  hashLists?: HashMatcher;
}

declare module 'fastify' {
  interface FastifyRequest {
    admission?: Admission;
    /** Who the work gate counts this request's decoding against: its address, or its account. */
    gateClient?: string;
    /** Set once the request is counted: a 503 answer takes the charge back. */
    chargeId?: string;
    /** Behind the edge: who ext_authz says the client is (set by edge-identity.ts). */
    edgeIdentity?: EdgeIdentity;
  }
}

const ENDPOINTS = [
  { url: DETECT_ROUTES.public, endpoint: 'public', schema: publicDetectSchema },
  { url: DETECT_ROUTES.open, endpoint: 'open', schema: openDetectSchema },
] as const;

export default async function detectApp(app: FastifyInstance, opts: DetectOptions): Promise<void> {
  // Bodies are read by intake, as streams, under our own size limit; Fastify must not buffer them.
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', (_request, payload, done) => done(null, payload));

  for (const { url, endpoint, schema } of ENDPOINTS) {
    app.post(url, {
      schema,
      validatorCompiler: describeOnly,
      // Authentication, admission and quota run before the body is read, so refusals cost no upload.
      // Order: the client first — its IP on the anonymous endpoint; on the key endpoint its account,
      // known only once the key is looked up (bounded per IP, taking no admission, so unknown keys
      // cost no capacity) — then room, then count, so that a request we cannot take is not charged,
      // while its 401 or 429, when that is its answer, stays the same whatever the load.
      onRequest: async (request, reply) => {
        // Unavailable before anything is counted: a request we cannot serve uses no quota.
        if (!opts.model.current) {
          throw new ApiError('UNAVAILABLE', 'The model is still loading; try again shortly', {
            'retry-after': '2',
          });
        }
        const facts: RequestFacts = {
          endpoint,
          clientIp: request.clientKey,
          deviceId: headerValue(request.headers['x-device-id']),
          authorization: headerValue(request.headers.authorization),
          edgeIdentity: request.edgeIdentity,
        };
        // No room: answer what counting would have answered, without counting.
        const refuseWithoutRoom = async (what?: string) => {
          if (opts.gate.closed) return opts.gate.busy();
          const verdict = await opts.authorizer.check(facts);
          return verdict.allowed ? opts.gate.busy(what) : verdict.error;
        };
        let admission: Admission | undefined;
        let decision: Decision;
        if (endpoint === 'public') {
          request.gateClient = `ip:${request.clientKey}`;
          admission = opts.gate.tryAdmit(request.gateClient);
          if (!admission) throw await refuseWithoutRoom();
          request.admission = admission;
          reply.raw.once('close', admission.release);
          decision = await opts.authorizer.authorize({ ...facts, requestId: randomUUID() });
        } else {
          if (!opts.gate.hasRoom) throw await refuseWithoutRoom();
          const lookup = opts.authorizer.looksUp(facts)
            ? opts.gate.tryLookup(`ip:${request.clientKey}`)
            : () => {};
          if (!lookup) throw opts.gate.busy('too many API key lookups in progress from this address');
          try {
            decision = await opts.authorizer.authorize({ ...facts, requestId: randomUUID() });
          } finally {
            lookup();
          }
        }
        if (!decision.allowed) {
          admission?.release();
          throw decision.error;
        }
        request.chargeId = decision.requestId;
        reply.headers(decision.headers);
        if (endpoint === 'public') return;
        // Counted, and now the account is known; a 503 from here is refunded (onSend).
        const account = decision.accountId === undefined ? undefined : `acct:${decision.accountId}`;
        request.gateClient = account ?? `ip:${request.clientKey}`;
        admission = opts.gate.tryAdmit(account);
        if (!admission) {
          throw opts.gate.busy(
            opts.gate.hasRoom ? 'too many uploads in progress for this account' : undefined,
          );
        }
        request.admission = admission;
        reply.raw.once('close', admission.release);
      },
      // A counted request answered 503 (no room for its account, upload bytes, a scoring worker
      // dying, shutdown …) uses no quota: the one place every such path passes.
      onSend: async (request, reply, payload) => {
        if (request.chargeId !== undefined && reply.statusCode === 503) {
          void opts.authorizer.refund(request.chargeId);
          request.chargeId = undefined;
        }
        return payload;
      },
      handler: (request, reply) => detect(request, reply, opts),
    });
  }

  // Live unless the scorer has lost threads it cannot get back (then only a restart helps); ready only
  // while a scoring worker can take an image.
  registerProbes(app, {
    live: () => {
      if (opts.model.current?.state === 'wedged')
        throw unavailable('Scoring threads stuck; restart the process');
    },
    ready: () => {
      const model = opts.model.current;
      if (!model) throw unavailable('Model not loaded');
      if (model.state !== 'ready') throw unavailable('No scoring worker can take an image');
      return { model: model.model };
    },
  });
}

async function detect(request: FastifyRequest, _reply: FastifyReply, opts: DetectOptions) {
  // The policy as the request arrives: a policy change mid-request never changes this request's answer.
  const thresholds = typeof opts.thresholds === 'function' ? opts.thresholds() : opts.thresholds;
  const intakeLimits = opts.maxFileBytes ? { ...opts.intake, maxBytes: opts.maxFileBytes() } : opts.intake;
  const intake = await inSpan('intake', {}, async (span) => {
    const admission = request.admission;
    const budget = admission && {
      holdBytes: admission.holdBytes,
      refusal: () => opts.gate.busy('too many upload bytes in progress'),
    };
    const result = await readImage(
      request.body as Readable | undefined,
      request.headers,
      intakeLimits,
      budget,
    );
    span.setAttribute('image.bytes', result.bytes.length);
    return result;
  });
  const { bytes } = intake;
  const started = performance.now();

  const format = await inSpan('sniff', { 'image.bytes': bytes.length }, async (span) => {
    const sniffed = await sniffFormat(bytes);
    span.setAttribute('image.format', sniffed);
    return sniffed;
  });
  if (intake.declaredUnsupported || (intake.declaredFormat && intake.declaredFormat !== format)) {
    const declared = intake.declaredUnsupported ?? `image/${intake.declaredFormat}`;
    throw new ApiError(
      'BAD_REQUEST',
      `Content-Type ${declared} does not match the image, which is ${format}`,
    );
  }

  const probed = await inSpan('probe', { 'image.format': format }, (span) => {
    const header = probeHeader(bytes, format, opts.limits);
    span.setAttributes({
      'image.width': header.width,
      'image.height': header.height,
      'image.frames': header.frames,
    });
    return header;
  });

  const scorer = opts.model.current;
  if (!scorer) throw new ApiError('UNAVAILABLE', 'The model is not loaded', { 'retry-after': '2' });
  // Read before scoring: the pool transfers the buffer to its worker, which empties it here.
  const byteLength = bytes.length;
  // The scoring slot is taken only now, with the image read: a slow upload holds none; and only once
  // what decoding it will take fits the decode budget.
  const memory = decodeMemoryBytes(bytes, probed);
  const scored = await opts.gate.score(
    (stillHeld) => scorer.score(bytes, probed, stillHeld),
    memory,
    request.gateClient,
  );
  const timingMs = performance.now() - started;
  // Decoding and inference ran in a worker thread; their spans are recorded here, with its timings.
  const attributes = {
    'image.width': probed.width,
    'image.height': probed.height,
    'image.bytes': byteLength,
  };
  recordSpan('decode', { ...attributes, 'image.format': format }, scored.decodeStartedAt, scored.decodeMs);
  recordSpan(
    'inference',
    { ...attributes, 'model.name': scorer.model, 'model.input_size': scorer.inputSize },
    scored.decodeStartedAt + scored.decodeMs,
    scored.inferenceMs,
  );
  const matchStarted = epochMs();
  const matches = opts.hashLists?.match(scored.pdq) ?? [];
  if (opts.hashLists) {
    // The lists' names and distances only: a hash never reaches a trace.
    recordSpan(
      'hash-match',
      {
        'hash_list.matches': matches.length,
        ...(matches.length > 0 && { 'hash_list.names': matches.map((m) => m.list).join(',') }),
      },
      matchStarted,
      epochMs() - matchStarted,
    );
  }
  return ok(
    buildResult({
      scores: scored.scores,
      ...(scored.pdq && { pdq: scored.pdq }),
      matches,
      thresholds,
      probed,
      sha256: intake.sha256,
      bytes: byteLength,
      timingMs,
    }),
  );
}

const epochMs = (): number => performance.timeOrigin + performance.now();
