import { createHash, timingSafeEqual } from 'node:crypto';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import express, { type NextFunction, type Request, type Response } from 'express';
import type { Registry } from 'prom-client';
import type { ClickHouseClient, Logger } from '../common/index.ts';
import type { FlagThresholds } from '../queries/index.ts';
import { createChartRoutes } from './charts/render.ts';
import { createPageRoutes } from './pages/html.ts';
import { createReadApi } from './read-api.ts';
import { createRequestMetrics } from './request-metrics.ts';

export interface HttpServerOptions {
  port: number;
  host: string;
  client: ClickHouseClient;
  database: string;
  log: Logger;
  ready?: () => boolean;
  /**
   * When set, every request but /healthz and the static page assets must carry it, as
   * `Authorization: Bearer TOKEN` or `?token=TOKEN`. Off (no authentication) by default.
   */
  authToken?: string;
  /** Detection thresholds of /api/flags and the charts (defaults when absent). */
  flagThresholds?: FlagThresholds;
  /**
   * Served at /metrics in the Prometheus text format (e.g. lifecycle, pipeline and collector metrics merged); the
   * server adds its requests' and named queries' durations to it (request-metrics.ts).
   */
  metricsRegistry?: Registry;
}

const digest = (s: string) => createHash('sha256').update(s).digest();

/** Read-only: GET and HEAD only. With a token configured, the bearer header or ?token= must match it. */
function guard(authToken: string | undefined) {
  const expected = authToken ? digest(authToken) : undefined;
  return (req: Request, res: Response, next: NextFunction) => {
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      res.setHeader('Allow', 'GET, HEAD');
      res.status(405).json({ error: 'read-only: GET only' });
      return;
    }
    const url = new URL(req.url, 'http://holdscope.invalid');
    const queryToken = url.searchParams.get('token') ?? undefined;
    if (url.searchParams.has('token')) {
      // The token is no query parameter of the API: take it out before the routes see the query string.
      url.searchParams.delete('token');
      req.url = url.pathname + url.search;
    }
    if (!expected || req.path === '/healthz' || req.path.startsWith('/vendor/') || req.path.startsWith('/static/')) return next();
    const header = req.get('authorization') ?? '';
    const bearer = /^Bearer\s+(.+)$/i.exec(header)?.[1]?.trim();
    const given = bearer ?? queryToken;
    if (given !== undefined && timingSafeEqual(digest(given), expected)) return next();
    res.setHeader('WWW-Authenticate', 'Bearer realm="holdscope"');
    res.status(401).json({ error: 'authentication required: Authorization: Bearer TOKEN or ?token=TOKEN' });
  };
}

/** The HTTP port: health, the read API, and the on-call pages and their charts. */
export async function startHttpServer(options: HttpServerOptions): Promise<{ port: number; close(): Promise<void> }> {
  const app = express();
  app.disable('x-powered-by');
  const registry = options.metricsRegistry;
  const requestMetrics = registry ? createRequestMetrics(registry) : undefined;
  if (requestMetrics) app.use(requestMetrics.middleware);
  app.use(guard(options.authToken));
  if (registry) {
    app.get('/metrics', async (_req, res) => {
      res.type(registry.contentType).send(await registry.metrics());
    });
  }
  app.use(createReadApi(options));
  app.use(createChartRoutes(options));
  app.use(createPageRoutes());
  app.use((_req, res) => {
    res.status(404).json({ error: 'not found' });
  });
  const server: Server = app.listen(options.port, options.host);
  try {
    await new Promise<void>((resolve, reject) => {
      server.once('listening', resolve);
      server.once('error', reject);
    });
  } catch (error) {
    requestMetrics?.close();
    throw error;
  }
  return {
    port: (server.address() as AddressInfo).port,
    close: () =>
      new Promise<void>((resolve) => {
        requestMetrics?.close();
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
