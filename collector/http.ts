import { timingSafeEqual } from 'node:crypto';
import express, { type NextFunction, type Request, type Response } from 'express';
import { PD_PREFIX } from '../contract/index.ts';
import { decodeOtlpJsonBounded } from '../contract/otlp-json.ts';
import { clipText, decodeOtlpProtobufBounded, LimitError, type BoundedDecode, type DecodeLimits } from '../contract/otlp-proto.ts';
import { InputError, OverloadedError, type Logger } from '../common/index.ts';
import { DECODE_BUDGET_FACTOR, KAFKA_BUDGET_FACTOR, type CollectorConfig } from './config.ts';
import { rejectionSummary, triage, type Triage, type TriageLimits } from './messages.ts';
import type { CollectorMetrics } from './metrics.ts';
import { exportResponse, RpcCode, statusResponse, type Encoding } from './otlp-response.ts';
import type { SpanQueue } from './span-queue.ts';

const CONTENT_TYPES: Record<string, Encoding> = { 'application/x-protobuf': 'protobuf', 'application/json': 'json' };

function encodingOf(req: Request): Encoding | undefined {
  const type = (req.headers['content-type'] ?? '').split(';')[0]?.trim().toLowerCase() ?? '';
  return CONTENT_TYPES[type];
}

function reply(res: Response, encoding: Encoding, status: number, body: Buffer, retryAfterMs?: number): void {
  res.status(status).type(encoding === 'json' ? 'application/json' : 'application/x-protobuf');
  if (retryAfterMs !== undefined) res.setHeader('Retry-After', String(Math.max(1, Math.ceil(retryAfterMs / 1000))));
  res.send(body);
}

/** Longest reason an error response gives: it may quote input. */
const MAX_MESSAGE = 2048;

function fail(res: Response, encoding: Encoding, status: number, code: number, message: string, retryAfterMs?: number): void {
  reply(res, encoding, status, statusResponse(encoding, code, clipText(message, MAX_MESSAGE)), retryAfterMs);
}

/** The request's body, which the request then no longer holds (nor keeps alive while it waits for Kafka). */
function takeBody(req: Request): Buffer {
  const body: unknown = req.body;
  req.body = undefined;
  return Buffer.isBuffer(body) ? body : Buffer.alloc(0);
}

/**
 * Decodes a body within the limits and splits it into Kafka messages, dead letters and rejections; or says
 * why not (400 malformed, 413 too large). Synchronous, and nothing of the decoded request outlives it: while
 * a request waits for Kafka it holds only its messages.
 */
function decodeAndTriage(body: Buffer, encoding: Encoding, decodeLimits: DecodeLimits, triageLimits: TriageLimits): Triage | { status: 400 | 413; message: string } {
  try {
    const decoded: BoundedDecode = encoding === 'json' ? decodeOtlpJsonBounded(body, decodeLimits) : decodeOtlpProtobufBounded(body, decodeLimits);
    return triage(decoded.request, triageLimits, new Date(), decoded.cut, decoded.spanBytes);
  } catch (error) {
    if (error instanceof LimitError) return { status: 413, message: error.message };
    if (error instanceof InputError) return { status: 400, message: error.message };
    throw error;
  }
}

function tokenMatches(header: string | undefined, token: string): boolean {
  const given = Buffer.from(header?.startsWith('Bearer ') ? header.slice(7) : '');
  const expected = Buffer.from(token);
  return given.length === expected.length && timingSafeEqual(given, expected);
}

export interface CollectorAppOptions {
  config: CollectorConfig;
  queue: SpanQueue;
  metrics: CollectorMetrics;
  log: Logger;
}

/**
 * The OTLP/HTTP trace receiver (`POST /v1/traces`), with `/healthz`, `/readyz` and `/metrics`.
 * A 200 means every accepted PD span is in Kafka; anything else tells the sender what to do next.
 */
export function createCollectorApp({ config, queue, metrics, log }: CollectorAppOptions): express.Express {
  const app = express();
  app.disable('x-powered-by');
  const count = (status: number) => metrics.requests.inc({ status: String(status) });
  const decodeLimits: DecodeLimits = {
    maxSpans: config.maxSpansPerRequest,
    maxAttributes: config.maxAttributes,
    maxValueItems: config.maxAttributeLength,
    maxDecodedBytes: DECODE_BUDGET_FACTOR * Math.max(config.maxBodyBytes, 64 * 1024),
    // Spans outside the pd. namespace are only counted: their attributes are never decoded.
    attributesOnlyWithPrefix: PD_PREFIX,
  };
  const triageLimits: TriageLimits = {
    maxAttributeLength: config.maxAttributeLength,
    maxAttributes: config.maxAttributes,
    maxMessageBytes: config.maxMessageBytes,
    maxRequestKafkaBytes: KAFKA_BUDGET_FACTOR * Math.max(config.maxBodyBytes, 64 * 1024),
    maxDeadLetterBytes: Math.max(config.maxBodyBytes, 64 * 1024),
  };

  app.get('/healthz', (_req, res) => {
    res.json({ status: 'ok', kafka: queue.healthy() ? 'up' : 'down' });
  });
  app.get('/readyz', (_req, res) => {
    res.status(queue.healthy() ? 200 : 503).json({ ready: queue.healthy() });
  });
  app.get('/metrics', async (_req, res) => {
    res.type(metrics.registry.contentType).send(await metrics.registry.metrics());
  });

  app.post(
    '/v1/traces',
    (req: Request, res: Response, next: NextFunction) => {
      const encoding = encodingOf(req) ?? 'json';
      if (config.authToken && !tokenMatches(req.headers.authorization, config.authToken)) {
        count(401);
        res.setHeader('WWW-Authenticate', 'Bearer');
        fail(res, encoding, 401, RpcCode.unauthenticated, 'missing or wrong bearer token');
        return;
      }
      if (!encodingOf(req)) {
        count(415);
        fail(res, 'json', 415, RpcCode.invalidArgument, `unsupported Content-Type ${JSON.stringify(req.headers['content-type'] ?? '')}: send application/x-protobuf or application/json`);
        return;
      }
      next();
    },
    // body-parser applies the limit after decompression, so a gzip bomb stops at maxBodyBytes.
    express.raw({ type: () => true, limit: config.maxBodyBytes, inflate: true }),
    async (req: Request, res: Response) => {
      const encoding = encodingOf(req) as Encoding;
      const result = decodeAndTriage(takeBody(req), encoding, decodeLimits, triageLimits);
      if ('status' in result) {
        count(result.status);
        fail(res, encoding, result.status, RpcCode.invalidArgument, result.message);
        return;
      }
      metrics.spansReceived.inc(result.received);
      metrics.spansNotOurs.inc(result.notOurs);
      for (const r of result.rejections) metrics.spansRejected.inc({ field: r.field });
      const published = await queue.publish(result.messages, result.deadLetters);
      if (published.kind !== 'success') {
        const overloaded = published.error instanceof OverloadedError;
        const status = overloaded ? 429 : 503;
        count(status);
        const afterMs = published.kind === 'retryable' ? published.afterMs : 1000;
        fail(res, encoding, status, overloaded ? RpcCode.resourceExhausted : RpcCode.unavailable, published.error.message, afterMs);
        return;
      }
      count(200);
      const rejected = result.rejections.length;
      if (rejected > 0) log.debug({ rejected, first: result.rejections[0] }, 'rejected PD spans');
      reply(res, encoding, 200, exportResponse(encoding, rejected, rejected > 0 ? rejectionSummary(result.rejections) : ''));
    },
  );

  app.use((req: Request, res: Response) => {
    fail(res, 'json', 404, RpcCode.unimplemented, `no route ${req.method} ${req.path}: OTLP traces go to POST /v1/traces`);
  });

  // Errors from body parsing (size, encoding, aborted uploads) come here with an HTTP status of their own.
  app.use((error: Error & { status?: number; type?: string }, req: Request, res: Response, _next: NextFunction) => {
    const encoding = encodingOf(req) ?? 'json';
    const status = error.status && error.status >= 400 && error.status < 500 ? error.status : 500;
    count(status);
    if (status === 500) log.error({ err: error }, 'collector request failed');
    const message =
      error.type === 'entity.too.large'
        ? `body larger than ${config.maxBodyBytes} bytes (after decompression)`
        : error.type === 'encoding.unsupported'
          ? `unsupported Content-Encoding ${JSON.stringify(req.headers['content-encoding'] ?? '')}: send gzip or none`
          : status === 500
            ? 'internal error'
            : error.message;
    if (!res.headersSent) fail(res, encoding, status, status === 500 ? RpcCode.internal : RpcCode.invalidArgument, message);
  });
  return app;
}
