// The one HTTP foundation every holdscope listener stands on (collector, read API and pages, pipeline metrics):
// authentication, health and readiness, /metrics, security headers and the one error handler. A listener adds only
// its own routes, and its own error body format where its protocol has one (OTLP's Status).
import { createHash, timingSafeEqual } from 'node:crypto';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import express, { type NextFunction, type Request, type Response } from 'express';
import type { Registry } from 'prom-client';
import { HoldscopeError, InputError, OverloadedError, UnavailableError } from './errors.ts';
import type { Logger } from './logger.ts';

/** What /readyz reports: whether the process can do its job now, with details an operator reads. */
export interface Readiness {
  ready: boolean;
  [detail: string]: unknown;
}

/** Writes an error in the listener's own format; the foundation has already set the status and Retry-After. */
export type ErrorWriter = (req: Request, res: Response, status: number, message: string) => void;

export interface HttpFoundationOptions {
  log: Logger;
  /** When set, every request but the public paths must carry `Authorization: Bearer TOKEN` (scheme in any case). */
  authToken?: string;
  /** Also accept the token as `?token=` (a browser opening a page by link cannot set a header). */
  acceptQueryToken?: boolean;
  /** Paths served without the token besides /healthz and /readyz (static assets that hold no data). */
  isPublicPath?: (path: string) => boolean;
  /** Methods the listener serves at all; others get 405 with Allow. */
  methods?: readonly string[];
  /** Behind /readyz; ready when absent. */
  readiness?: () => Readiness;
  /** Served at /metrics in the Prometheus text format. */
  metricsRegistry?: Registry;
  /** Error body format; JSON `{ "error": message }` by default. */
  writeError?: ErrorWriter;
}

const digest = (text: string) => createHash('sha256').update(text).digest();

/** The token of an `Authorization: Bearer TOKEN` header: the scheme is case-insensitive (RFC 9110 section 11.1). */
export function bearerToken(header: string | undefined): string | undefined {
  return /^bearer[ \t]+(\S+)[ \t]*$/i.exec(header ?? '')?.[1];
}

/** Compares in constant time whatever the lengths (both sides hashed first). */
export function tokenMatches(given: string | undefined, expected: string): boolean {
  return given !== undefined && timingSafeEqual(digest(given), digest(expected));
}

/** Seconds for a Retry-After header: at least 1, as the header takes whole seconds. */
export const retryAfterSeconds = (ms: number) => String(Math.max(1, Math.ceil(ms / 1000)));

/**
 * The status an error answers with, and whether its message may be shown: the caller's fault (4xx) says why; an
 * overload or outage says when to come back; anything else is an internal error whose detail stays in the log.
 */
export function httpStatusOf(error: unknown): { status: number; message: string; retryAfterMs?: number } {
  if (error instanceof InputError) return { status: 400, message: error.message };
  if (error instanceof OverloadedError) return { status: 429, message: error.message, retryAfterMs: error.retryAfterMs };
  if (error instanceof HoldscopeError && error.retriable) {
    // The message may quote ClickHouse or Kafka internals: the log has it, the answer says what kind and when.
    const retryAfterMs = error instanceof UnavailableError ? error.retryAfterMs : 1000;
    return { status: 503, message: `unavailable (${error.code}); retry in ${retryAfterSeconds(retryAfterMs)} s`, retryAfterMs };
  }
  // Errors of Express and body-parser carry a status and say whether their message is safe to expose.
  const http = error as { status?: unknown; expose?: unknown; message?: unknown } | null;
  if (typeof http?.status === 'number' && http.status >= 400 && http.status < 500) {
    return { status: http.status, message: http.expose === true && typeof http.message === 'string' ? http.message : 'bad request' };
  }
  return { status: 500, message: 'internal error' };
}

const writeJsonError: ErrorWriter = (_req, res, _status, message) => {
  res.json({ error: message });
};

/**
 * An Express app with the foundation's routes and guards in place. Add routes to `app`, then call `finish()`: it adds
 * the 404 and the error handler, which must come after every route.
 */
export function createHttpApp(options: HttpFoundationOptions): { app: express.Express; finish(): void } {
  const app = express();
  app.disable('x-powered-by');
  const writeError = options.writeError ?? writeJsonError;
  const sendStatus = (req: Request, res: Response, status: number, message: string, retryAfterMs?: number) => {
    if (retryAfterMs !== undefined) res.setHeader('Retry-After', retryAfterSeconds(retryAfterMs));
    res.status(status);
    writeError(req, res, status, message);
  };

  app.use((req: Request, res: Response, next: NextFunction) => {
    // Every answer, errors included: a browser must never guess a type (a span's text served as HTML).
    res.setHeader('X-Content-Type-Options', 'nosniff');
    if (options.methods && !options.methods.includes(req.method)) {
      res.setHeader('Allow', options.methods.join(', '));
      sendStatus(req, res, 405, `method ${req.method} not allowed: ${options.methods.join(', ')} only`);
      return;
    }
    next();
  });

  app.get('/healthz', (_req, res) => {
    // Liveness: the process serves requests. Whether it can do its job is /readyz.
    res.json({ status: 'ok', ...options.readiness?.() });
  });
  app.get('/readyz', (_req, res) => {
    const readiness = options.readiness?.() ?? { ready: true };
    res.status(readiness.ready ? 200 : 503).json(readiness);
  });

  if (options.acceptQueryToken) app.use(takeQueryToken);
  if (options.authToken) app.use(authGuard(options.authToken, options, sendStatus));

  const registry = options.metricsRegistry;
  if (registry) {
    app.get('/metrics', async (_req, res) => {
      res.type(registry.contentType).send(await registry.metrics());
    });
  }

  const finish = () => {
    app.use((req: Request, res: Response) => {
      sendStatus(req, res, 404, `no route ${req.method} ${req.path}`);
    });
    app.use((error: unknown, req: Request, res: Response, _next: NextFunction) => {
      const { status, message, retryAfterMs } = httpStatusOf(error);
      if (status >= 500) options.log.error({ err: error, method: req.method, path: req.path }, 'request failed');
      if (res.headersSent) {
        res.destroy();
        return;
      }
      sendStatus(req, res, status, message, retryAfterMs);
    });
  };
  return { app, finish };
}

/** Moves `?token=` out of the URL into `res.locals`, so that no route sees it as a parameter of its own. */
function takeQueryToken(req: Request, res: Response, next: NextFunction): void {
  const url = new URL(req.url, 'http://holdscope.invalid');
  if (url.searchParams.has('token')) {
    res.locals.queryToken = url.searchParams.get('token') ?? undefined;
    url.searchParams.delete('token');
    req.url = url.pathname + url.search;
  }
  next();
}

function authGuard(
  token: string,
  options: HttpFoundationOptions,
  sendStatus: (req: Request, res: Response, status: number, message: string) => void,
) {
  return (req: Request, res: Response, next: NextFunction) => {
    if (options.isPublicPath?.(req.path)) return next();
    let given = bearerToken(req.get('authorization'));
    if (given === undefined && typeof res.locals.queryToken === 'string') given = res.locals.queryToken;
    if (tokenMatches(given, token)) return next();
    res.setHeader('WWW-Authenticate', 'Bearer realm="holdscope"');
    sendStatus(
      req,
      res,
      401,
      options.acceptQueryToken
        ? 'authentication required: Authorization: Bearer TOKEN or ?token=TOKEN'
        : 'authentication required: Authorization: Bearer TOKEN',
    );
  };
}

export interface Listening {
  port: number;
  /**
   * Stops taking connections. `drain` lets requests under way get their answer (a sender waiting for Kafka learns
   * whether its spans were taken); `now` ends them too (reads, which the client can simply repeat).
   */
  close(mode?: 'drain' | 'now'): Promise<void>;
}

/** Listens on host:port (0 for any free port). */
export async function listen(app: express.Express, port: number, host: string): Promise<Listening> {
  const server: Server = app.listen(port, host);
  await new Promise<void>((resolve, reject) => {
    server.once('listening', resolve);
    server.once('error', reject);
  });
  return {
    port: (server.address() as AddressInfo).port,
    close: (mode = 'drain') =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        if (mode === 'now') server.closeAllConnections();
        else server.closeIdleConnections();
      }),
  };
}
