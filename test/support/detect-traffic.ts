// Steady detect traffic for the node suites: a few clients posting the JPEG through the gateway one
// request after the other until stopped, every answer kept (status, code, thresholds, scores, when).

import { post } from './stack-client.ts';

export interface TrafficAnswer {
  at: number;
  status: number;
  code: number | undefined;
  thresholds: string | undefined;
  scores: string | undefined;
  /** The envelope's message of a refusal: tells detect's own 503 from one Envoy made. */
  message?: string;
  /**
   * A refusal's time to answer and headers: one without X-RateLimit headers never passed ext_authz (its
   * check failed: a 503 after extAuthzTimeout when the sidecar did not answer).
   */
  ms?: number;
  headers?: Record<string, string>;
  error?: string;
}

export interface DetectTraffic {
  answers: TrafficAnswer[];
  /** Stops sending; resolves once every client's last request has its answer. */
  stop(): Promise<TrafficAnswer[]>;
}

export function detectTraffic(
  gateway: string,
  opts: { clients?: number; path?: string; headers?: Record<string, string> } = {},
): DetectTraffic {
  const answers: TrafficAnswer[] = [];
  let running = true;
  const client = async () => {
    while (running) {
      const at = Date.now();
      try {
        const a = await post(gateway, opts.path ?? '/api/public/detect', { headers: opts.headers ?? {} });
        answers.push({
          at,
          status: a.status,
          code: a.code,
          thresholds: a.body?.data?.thresholds ? JSON.stringify(a.body.data.thresholds) : undefined,
          scores: a.body?.data?.scores ? JSON.stringify(a.body.data.scores) : undefined,
          ...(a.code
            ? { message: a.body?.message, ms: Math.round(a.ms), headers: Object.fromEntries(a.headers) }
            : {}),
        });
      } catch (err) {
        answers.push({
          at,
          status: 0,
          code: undefined,
          thresholds: undefined,
          scores: undefined,
          error: String(err),
        });
      }
    }
  };
  const clients = Array.from({ length: opts.clients ?? 2 }, client);
  return {
    answers,
    stop: async () => {
      running = false;
      await Promise.all(clients);
      return answers;
    },
  };
}

/** Answers counted by status (and envelope code when not 0), for the printed figures. */
export function countAnswers(answers: readonly TrafficAnswer[]): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const a of answers) {
    const key = a.status === 0 ? 'connection error' : a.code ? `${a.status}/${a.code}` : String(a.status);
    counts[key] = (counts[key] ?? 0) + 1;
  }
  return counts;
}
