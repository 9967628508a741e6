import type { Registry } from 'prom-client';
import { createHttpApp, listen, type ClickHouseClient, type Listening, type Logger, type Readiness } from '../common/index.ts';
import type { FlagThresholds, ReadLimits } from '../queries/index.ts';
import { createCompareChartRoutes } from './charts/compare.ts';
import { createChartRoutes } from './charts/render.ts';
import { createPageRoutes, isPageAsset } from './pages/html.ts';
import { createReadApi } from './read-api.ts';
import { createRequestMetrics } from './request-metrics.ts';

export interface HttpServerOptions {
  port: number;
  host: string;
  client: ClickHouseClient;
  database: string;
  log: Logger;
  /** Behind /readyz (and the details of /healthz): in `start`, whether the stack accepts spans yet. */
  readiness?: () => Readiness;
  /**
   * When set, every request but /healthz, /readyz and the static page assets must carry it, as
   * `Authorization: Bearer TOKEN` or `?token=TOKEN`. Off (no authentication) by default.
   */
  authToken?: string;
  /** Detection thresholds of /api/flags and the charts (defaults when absent). */
  flagThresholds?: FlagThresholds;
  /** Widest window, ClickHouse limits and concurrency of every read (DEFAULT_READ_LIMITS when absent). */
  readLimits?: ReadLimits;
  /**
   * Served at /metrics in the Prometheus text format (e.g. lifecycle, pipeline and collector metrics merged); the
   * server adds its requests' and named queries' durations to it (request-metrics.ts).
   */
  metricsRegistry?: Registry;
}

/** The HTTP port: health, the read API, and the on-call pages and their charts. Read-only: GET and HEAD. */
export async function startHttpServer(options: HttpServerOptions): Promise<Listening> {
  const registry = options.metricsRegistry;
  const requestMetrics = registry ? createRequestMetrics(registry) : undefined;
  const { app, finish } = createHttpApp({
    log: options.log,
    authToken: options.authToken,
    acceptQueryToken: true,
    isPublicPath: isPageAsset,
    methods: ['GET', 'HEAD'],
    readiness: options.readiness,
    metricsRegistry: registry,
  });
  if (requestMetrics) app.use(requestMetrics.middleware);
  app.use(createReadApi(options));
  // Before the named charts: /charts/compare.* takes /api/compare's keys, not a chart window.
  app.use(createCompareChartRoutes(options));
  app.use(createChartRoutes(options));
  app.use(createPageRoutes());
  finish();
  let listening: Listening;
  try {
    listening = await listen(app, options.port, options.host);
  } catch (error) {
    requestMetrics?.close();
    throw error;
  }
  return {
    port: listening.port,
    close: async () => {
      requestMetrics?.close();
      // Reads under way are cut: a client repeats a read, and a slow one must not hold a shutdown.
      await listening.close('now');
    },
  };
}
