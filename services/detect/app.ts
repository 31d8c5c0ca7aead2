// The detect service as a Fastify plugin: both detect endpoints plus the internal readiness probes.
// The composition root hands it its capabilities (model slot, authorizer, work gate); it never
// chooses implementations itself.

import { randomUUID } from 'node:crypto';
import type { Readable } from 'node:stream';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { Authorizer, Decision, EdgeIdentity, RequestFacts } from '../../lib/common/authorizer.ts';
import { describeOnly } from '../../lib/common/describe-only.ts';
import { ok } from '../../lib/common/envelope.ts';
import { ApiError, isApiError } from '../../lib/common/errors.ts';
import { headerValue } from '../../lib/common/header-value.ts';
import { type ProbeCheck, registerProbes, unavailable } from '../../lib/common/probes.ts';
import { DETECT_ROUTES } from '../../lib/common/routes.ts';
import { SETTINGS } from '../../lib/common/settings.ts';
import { inSpan, recordSpan } from '../../lib/common/telemetry.ts';
import type { HashListMatch, HashMatcher } from './hash-lists.ts';
import { decodeMemoryBytes } from './image/decode-memory.ts';
import { imageCostHeader, predictedCpuMs } from './image/image-cost.ts';
import type { ImagePdq } from './image/pdq.ts';
import { costFacts } from './image/probe.ts';
import type { DimensionLimits } from './image/types.ts';
import { type IntakeLimits, readImage, sha256InSlices } from './intake.ts';
import { readHeader } from './read-header.ts';
import { buildResult, type Thresholds } from './result.ts';
import { openDetectSchema, publicDetectSchema } from './schemas.ts';
import { releaseBuffer } from './scoring/release-buffer.ts';
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
  /**
   * SCORING_DEADLINE_MS: an image whose predicted work (image-cost.ts) cannot finish inside it on one
   * core is refused before any (4005, charged). Default: the setting's default.
   */
  scoringDeadlineMs?: number;
  /** MAX_TILES, for the predicted cost of a long frame. Default: the setting's default. */
  maxTiles?: number;
  /**
   * Frames of an animation scored, at most: the DetectionPolicy's, else MAX_FRAMES_SCORED; read once per
   * request (like the thresholds), for the predicted cost and the scorer. Default: the setting's default.
   */
  maxFramesScored?: number | (() => number);
  /** What else detect needs to answer (the all-in-one server: its quota stores), checked by readiness. */
  alsoReady?: ProbeCheck;
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
      // dying, shutdown …) uses no quota: the one place every such path passes. Work cut short for
      // the image's own cost (a deadline or CPU limit) is answered 4005 and stays charged
      // (docs/isolation-and-charging.md).
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
    ready: async () => {
      const model = opts.model.current;
      if (!model) throw unavailable('Model not loaded');
      if (model.state !== 'ready') throw unavailable('No scoring worker can take an image');
      return { model: model.model, ...(await opts.alsoReady?.()) };
    },
  });
}

async function detect(request: FastifyRequest, reply: FastifyReply, opts: DetectOptions) {
  // The policy as the request arrives: a policy change mid-request never changes this request's answer.
  const thresholds = typeof opts.thresholds === 'function' ? opts.thresholds() : opts.thresholds;
  const maxFramesScored =
    (typeof opts.maxFramesScored === 'function' ? opts.maxFramesScored() : opts.maxFramesScored) ??
    SETTINGS.MAX_FRAMES_SCORED.default;
  const intakeLimits = opts.maxFileBytes ? { ...opts.intake, maxBytes: opts.maxFileBytes() } : opts.intake;
  const intake = await inSpan('intake', {}, async (span) => {
    const admission = request.admission;
    const budget = admission && {
      holdBytes: admission.holdBytes,
      refusal: () => opts.gate.busy('too many upload bytes in progress'),
    };
    // A raw body whose header walk passes its bound is refused while it streams in, with the answer
    // the whole body would get (streamed-header.ts): the rest of it is never copied.
    const result = await readImage(
      request.body as Readable | undefined,
      request.headers,
      intakeLimits,
      budget,
      (prefix, declared) =>
        readHeader(prefix, declared, opts.limits).catch((err: unknown) => {
          // Only a refusal ends a body early (streamed-header.ts); anything else is a fault, logged
          // where it first shows. The whole body then meets it again, answered as any fault is.
          if (!isApiError(err)) request.log.error({ err }, 'header steps failed on a streamed prefix');
          throw err;
        }),
    );
    span.setAttribute('image.bytes', result.bytes.length);
    return result;
  });
  const { bytes } = intake;
  // An image refused before it is handed to the scorer (its format, header, walk, cost; no room) frees
  // its body now rather than at the next collection: a 50 MB body is external memory that brings on a
  // full collection, a pause of every request's event loop (docs/isolation-and-charging.md).
  let handedOver = false;
  try {
    const started = performance.now();

    const { format, probed } = await readHeader(bytes, intake, opts.limits);

    const scorer = opts.model.current;
    if (!scorer) throw new ApiError('UNAVAILABLE', 'The model is not loaded', { 'retry-after': '2' });
    // Read before scoring: the pool transfers the buffer to its worker, which empties it here.
    const byteLength = bytes.length;
    // The scoring slot is taken only now, with the image read: a slow upload holds none; and only once
    // what decoding it will take fits the decode budget.
    const memory = decodeMemoryBytes(bytes, probed);
    // What the work will cost, from the header: stated to the client, the queue's order, and a refusal
    // before any work for an image that could not be done inside the deadline on one core.
    const facts = costFacts(bytes, probed, opts.maxTiles ?? SETTINGS.MAX_TILES.default, maxFramesScored);
    const costMs = predictedCpuMs(facts, scorer.model);
    reply.header('x-image-cost', imageCostHeader(facts, scorer.model));
    const deadlineMs = opts.scoringDeadlineMs ?? SETTINGS.SCORING_DEADLINE_MS.default;
    if (costMs > deadlineMs) {
      throw new ApiError(
        'UNDECODABLE',
        `Undecodable image: decoding and scoring it would take about ${(costMs / 1000).toFixed(1)} s of CPU, over the ${deadlineMs / 1000} s one image may take here`,
      );
    }
    // Hashed only now that the image is taken (a refused upload is never hashed), and in slices.
    const sha256 = await sha256InSlices(bytes);
    // The hash lists are searched on this thread as soon as the PDQ is known, while the image is inferred.
    const { hashLists } = opts;
    const timedMatch = (lists: HashMatcher, pdq: ImagePdq | undefined) => {
      const startedAt = epochMs();
      return { matches: lists.match(pdq), startedAt, ms: epochMs() - startedAt };
    };
    let matched: ReturnType<typeof timedMatch> | { error: unknown } | undefined;
    // PDQ_HASHES=auto hashes an image only while a list is in force.
    const hash = hashLists?.wantsHash() ?? false;
    const onPdq =
      hashLists &&
      hash &&
      ((pdq: ImagePdq) => {
        try {
          matched = timedMatch(hashLists, pdq);
        } catch (error) {
          matched = { error };
        }
      });
    const scored = await opts.gate.score(
      (stillHeld) => {
        // Handed over: the body no longer counts against the upload bytes, its decode memory does.
        handedOver = true;
        request.admission?.releaseBytes();
        return scorer.score(bytes, probed, stillHeld, {
          maxFramesScored,
          pdq: hash,
          ...(onPdq && { onPdq }),
        });
      },
      memory,
      request.gateClient,
      costMs,
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
    let matches: HashListMatch[] = [];
    if (hashLists && hash) {
      if (matched && 'error' in matched) throw matched.error;
      matched ??= timedMatch(hashLists, scored.pdq);
      matches = matched.matches;
      // The lists' names and distances only: a hash never reaches a trace.
      recordSpan(
        'hash-match',
        {
          'hash_list.matches': matches.length,
          ...(matches.length > 0 && { 'hash_list.names': matches.map((m) => m.list).join(',') }),
        },
        matched.startedAt,
        matched.ms,
      );
    }
    return ok(
      buildResult({
        model: scorer.model,
        scores: scored.scores,
        ...(scored.pdq && { pdq: scored.pdq }),
        matches,
        thresholds,
        probed,
        sha256,
        bytes: byteLength,
        timingMs,
        frames: scored.frames,
      }),
    );
  } finally {
    if (!handedOver) releaseBuffer(bytes);
  }
}

const epochMs = (): number => performance.timeOrigin + performance.now();
