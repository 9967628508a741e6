import express, { type NextFunction, type Request, type Response } from 'express';
import {
  clipText,
  decodeOtlpJsonBounded,
  decodeOtlpProtobufBounded,
  LimitError,
  PD_PREFIX,
  type BoundedDecode,
  type DecodeLimits,
  type SpanQueue,
} from '../contract/index.ts';
import { createHttpApp, httpStatusOf, InputError, retryAfterSeconds, type Logger } from '../common/index.ts';
import { DECODE_BUDGET_FACTOR, KAFKA_BUDGET_FACTOR, type CollectorConfig } from './config.ts';
import { rejectionSummary, triage, type Triage, type TriageLimits } from './messages.ts';
import type { CollectorMetrics } from './metrics.ts';
import { exportResponse, RpcCode, statusResponse, type Encoding } from './otlp-response.ts';

// A Map, not an object literal: a Content-Type of `constructor` or `__proto__` must be unknown (415), not the prototype's.
const CONTENT_TYPES = new Map<string, Encoding>([
  ['application/x-protobuf', 'protobuf'],
  ['application/json', 'json'],
]);

function encodingOf(req: Request): Encoding | undefined {
  const type = (req.headers['content-type'] ?? '').split(';')[0]?.trim().toLowerCase() ?? '';
  return CONTENT_TYPES.get(type);
}

function reply(res: Response, encoding: Encoding, status: number, body: Buffer, retryAfterMs?: number): void {
  res.status(status).type(encoding === 'json' ? 'application/json' : 'application/x-protobuf');
  if (retryAfterMs !== undefined) res.setHeader('Retry-After', retryAfterSeconds(retryAfterMs));
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
function decodeAndTriage(
  body: Buffer,
  encoding: Encoding,
  decodeLimits: DecodeLimits,
  triageLimits: TriageLimits,
): Triage | { status: 400 | 413; message: string } {
  try {
    const decoded: BoundedDecode =
      encoding === 'json' ? decodeOtlpJsonBounded(body, decodeLimits) : decodeOtlpProtobufBounded(body, decodeLimits);
    return triage(decoded.request, triageLimits, new Date(), decoded.cut, decoded.spanBytes);
  } catch (error) {
    if (error instanceof LimitError) return { status: 413, message: error.message };
    if (error instanceof InputError) return { status: 400, message: error.message };
    throw error;
  }
}

export interface CollectorAppOptions {
  config: CollectorConfig;
  queue: SpanQueue;
  metrics: CollectorMetrics;
  log: Logger;
}

/** What one request may cost to decode and to turn into Kafka messages, from the configuration. */
function requestLimits(config: CollectorConfig): { decodeLimits: DecodeLimits; triageLimits: TriageLimits } {
  const body = Math.max(config.maxBodyBytes, 64 * 1024);
  return {
    decodeLimits: {
      maxSpans: config.maxSpansPerRequest,
      maxAttributes: config.maxAttributes,
      maxValueItems: config.maxAttributeLength,
      maxDecodedBytes: DECODE_BUDGET_FACTOR * body,
      // Spans outside the pd. namespace are only counted: their attributes are never decoded.
      attributesOnlyWithPrefix: PD_PREFIX,
    },
    triageLimits: {
      maxAttributeLength: config.maxAttributeLength,
      maxAttributes: config.maxAttributes,
      maxMessageBytes: config.maxMessageBytes,
      maxRequestKafkaBytes: KAFKA_BUDGET_FACTOR * body,
      maxDeadLetterBytes: body,
      maxClockSkewMs: config.maxClockSkewMs,
      retentionDays: config.retentionDays,
    },
  };
}

/** The OTLP Status code of an HTTP error status. */
const rpcCodeOf = (status: number) =>
  status === 401
    ? RpcCode.unauthenticated
    : status === 404
      ? RpcCode.unimplemented
      : status >= 500
        ? RpcCode.internal
        : RpcCode.invalidArgument;

/**
 * The OTLP/HTTP trace receiver (`POST /v1/traces`), with `/healthz`, `/readyz` and `/metrics`.
 * A 200 means every accepted PD span is in Kafka; anything else tells the sender what to do next.
 */
export function createCollectorApp({ config, queue, metrics, log }: CollectorAppOptions): express.Express {
  const { app, finish } = createHttpApp({
    log,
    authToken: config.authToken,
    readiness: () => ({ ready: queue.healthy(), kafka: queue.healthy() ? 'up' : 'down' }),
    metricsRegistry: metrics.registry,
    // Errors in OTLP's own Status message, in the encoding the sender used; every error answer is counted.
    writeError: (req, res, status, message) => {
      count(status);
      const encoding = encodingOf(req) ?? 'json';
      reply(res, encoding, status, statusResponse(encoding, rpcCodeOf(status), clipText(message, MAX_MESSAGE)));
    },
  });
  const count = (status: number) => metrics.requests.inc({ status: String(status) });
  const { decodeLimits, triageLimits } = requestLimits(config);

  app.post(
    '/v1/traces',
    (req: Request, res: Response, next: NextFunction) => {
      if (encodingOf(req)) return next();
      next(
        new PayloadError(
          415,
          `unsupported Content-Type ${JSON.stringify(clipText(req.headers['content-type'] ?? '', 100))}: send application/x-protobuf or application/json`,
        ),
      );
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
        // The status from the one error model; the message is ours (what waits for Kafka), safe to show the sender.
        const { status } = httpStatusOf(published.error);
        count(status);
        fail(
          res,
          encoding,
          status,
          status === 429 ? RpcCode.resourceExhausted : RpcCode.unavailable,
          published.error.message,
          published.afterMs,
        );
        return;
      }
      count(200);
      // Counted here rather than by the queue: a 200 is what the sender stops retrying on, Kafka or no Kafka.
      metrics.spansAccepted.inc(result.accepted);
      const rejected = result.rejections.length;
      if (rejected > 0) log.debug({ rejected, first: result.rejections[0] }, 'rejected PD spans');
      reply(res, encoding, 200, exportResponse(encoding, rejected, rejected > 0 ? rejectionSummary(result.rejections) : ''));
    },
  );

  // Errors from body parsing (size, encoding, aborted uploads) carry an HTTP status of their own; the foundation's
  // handler answers them, with these messages where the parser's own would not tell the sender what to change.
  app.use((error: Error & { status?: number; type?: string }, req: Request, _res: Response, next: NextFunction) => {
    if (error.type === 'entity.too.large')
      return next(new PayloadError(413, `body larger than ${config.maxBodyBytes} bytes (after decompression)`));
    if (error.type === 'encoding.unsupported') {
      return next(
        new PayloadError(415, `unsupported Content-Encoding ${JSON.stringify(req.headers['content-encoding'] ?? '')}: send gzip or none`),
      );
    }
    next(error);
  });
  finish();
  return app;
}

/** A body-parser error restated for the sender: its status, and a message safe to show. */
class PayloadError extends Error {
  readonly expose = true;
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}
