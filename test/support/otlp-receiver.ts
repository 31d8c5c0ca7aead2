// A minimal OTLP/HTTP trace receiver for process tests: the services export with their real SDK
// exporter (OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/json), this collects the spans. The full trace
// backend (Jaeger) is exercised by the e2e suite through the stack.

import { createServer, type Server } from 'node:http';

export interface ReceivedSpan {
  service: string;
  traceId: string;
  spanId: string;
  parentSpanId: string;
  name: string;
  kind: number;
  attributes: Record<string, unknown>;
}

interface OtlpValue {
  stringValue?: string;
  intValue?: string | number;
  boolValue?: boolean;
  doubleValue?: number;
}
interface OtlpAttribute {
  key: string;
  value: OtlpValue;
}
interface OtlpExport {
  resourceSpans?: Array<{
    resource?: { attributes?: OtlpAttribute[] };
    scopeSpans?: Array<{
      spans?: Array<{
        traceId: string;
        spanId: string;
        parentSpanId?: string;
        name: string;
        kind: number;
        attributes?: OtlpAttribute[];
      }>;
    }>;
  }>;
}

const plainValue = (v: OtlpValue): unknown => v.stringValue ?? v.intValue ?? v.boolValue ?? v.doubleValue;
const attributesOf = (list: OtlpAttribute[] = []) =>
  Object.fromEntries(list.map((a) => [a.key, plainValue(a.value)]));

export class OtlpReceiver {
  readonly spans: ReceivedSpan[] = [];
  readonly #server: Server;
  endpoint = '';

  private constructor() {
    this.#server = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        try {
          const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as OtlpExport;
          for (const rs of body.resourceSpans ?? []) {
            const service = String(attributesOf(rs.resource?.attributes)['service.name'] ?? '');
            for (const ss of rs.scopeSpans ?? []) {
              for (const s of ss.spans ?? []) {
                this.spans.push({
                  service,
                  traceId: s.traceId,
                  spanId: s.spanId,
                  parentSpanId: s.parentSpanId ?? '',
                  name: s.name,
                  kind: s.kind,
                  attributes: attributesOf(s.attributes),
                });
              }
            }
          }
          res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
        } catch {
          res.writeHead(400).end();
        }
      });
    });
  }

  static async start(): Promise<OtlpReceiver> {
    const receiver = new OtlpReceiver();
    await new Promise<void>((resolve) => receiver.#server.listen(0, '127.0.0.1', resolve));
    const { port } = receiver.#server.address() as { port: number };
    receiver.endpoint = `http://127.0.0.1:${port}`;
    return receiver;
  }

  /** The environment that makes a service export here, quickly. */
  env(): Record<string, string> {
    return {
      OTEL_EXPORTER_OTLP_ENDPOINT: this.endpoint,
      OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: 'http/json',
      OTEL_BSP_SCHEDULE_DELAY: '100',
    };
  }

  trace(traceId: string): ReceivedSpan[] {
    return this.spans.filter((s) => s.traceId === traceId);
  }

  close(): Promise<void> {
    return new Promise((resolve) => this.#server.close(() => resolve()));
  }
}
