// The detect service's root instance as its server runs it (tests inject): identity only from the
// edge, the work gate and the model slot metered, the policy file's thresholds and upload limit per
// request. The model itself is loaded by the process (server.ts) into `model`, the slot given here.

import type { FastifyInstance } from 'fastify';
import { createHttpMetrics, instrumentHttp } from '../../lib/common/metrics.ts';
import type { ModelChoice } from '../../lib/common/model-catalogue.ts';
import { createRootApp } from '../../lib/common/root-app.ts';
import { RedisHashLists } from '../../lib/hash-lists/hash-list-redis.ts';
import { modelAtBoot, policyForApp } from '../../lib/policy/policy-in-force.ts';
import { closeRedis, connectRedis } from '../quota/stores/redis-connection.ts';
import detectApp from './app.ts';
import type { DetectConfig } from './config.ts';
import { EdgeAuthorizer, requireEdgeIdentity } from './edge-identity.ts';
import {
  createHashListMetrics,
  fileSource,
  HashListWatcher,
  redisSource,
  registerHashListReport,
} from './hash-lists.ts';
import { intakeLimitsFrom } from './intake.ts';
import { MeteredGate, MeteredScorer } from './metered.ts';
import { createDetectMetrics } from './metrics.ts';
import type { ImageScorer } from './scoring/image-scorer.ts';
import type { ScorerSlot } from './scoring/scorer-slot.ts';

export interface DetectService {
  app: FastifyInstance;
  gate: MeteredGate;
  /** The model to load into the slot: the mounted policy's spec.model, else MODEL. */
  modelToLoad: ModelChoice;
  /** Wraps the loaded scorer so that its decode and inference times are measured. */
  meter: (scorer: ImageScorer) => ImageScorer;
}

export async function buildDetectService(
  config: DetectConfig,
  slot: ScorerSlot,
  opts: { logger?: boolean } = {},
): Promise<DetectService> {
  const app = createRootApp({ config, logger: opts.logger });
  const http = createHttpMetrics('detect');
  // The gauges read the gate when scraped, long after it exists.
  const metrics = createDetectMetrics(http.registry, () => gate);
  const gate = new MeteredGate(config.concurrency, metrics);
  instrumentHttp(app, http);
  requireEdgeIdentity(app, { secret: config.edgeSecret });
  // POLICY_FILE (the operator's ConfigMap, mounted): its thresholds and upload limit win over the
  // configuration's, from the next request on.
  const policy = policyForApp(app, config);
  // PDQ_HASHES off: no list is loaded, no image hashed (auto: hashed while a list is in force).
  const hashLists = config.hashLists.enabled
    ? new HashListWatcher(
        config.hashLists,
        app.log,
        createHashListMetrics(http.registry),
        hashListSource(config),
      )
    : undefined;
  hashLists?.start();
  app.addHook('onClose', async () => hashLists?.close());
  // Which lists this replica holds, for the operator's HashList status.
  registerHashListReport(app, () => hashLists?.current);
  await app.register(detectApp, {
    ...(hashLists && { hashLists }),
    model: slot,
    authorizer: new EdgeAuthorizer(),
    gate,
    thresholds: policy.thresholds,
    intake: intakeLimitsFrom(config),
    maxFileBytes: policy.maxFileBytes,
    limits: config.limits,
    scoringDeadlineMs: config.scoringDeadlineMs,
    maxTiles: config.maxTiles,
    maxFramesScored: () => policy.maxFramesScored() ?? config.maxFramesScored,
  });
  return {
    app,
    gate,
    modelToLoad: modelAtBoot(policy, config),
    meter: (scorer) => new MeteredScorer(scorer, metrics),
  };
}

/** The embedded file, or (HASH_LISTS_FROM=redis) the operator's lists in Redis on a connection of their own. */
function hashListSource(config: DetectConfig) {
  if (config.hashLists.from === 'file' || !config.redisTarget) return fileSource(config.hashLists.file);
  const redis = connectRedis({
    target: config.redisTarget,
    commandTimeoutMs: config.redis.commandTimeoutMs,
    socketTimeoutMs: config.redis.socketTimeoutMs,
    connectTimeoutMs: config.redis.connectTimeoutMs,
    name: 'nsfwdetector-detect-hash-lists',
  });
  return redisSource(
    new RedisHashLists(redis, config.redis.keyPrefix),
    () => redis.status === 'ready',
    () => closeRedis(redis),
  );
}
