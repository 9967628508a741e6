import diagnosticsChannel from 'node:diagnostics_channel';
import type { NextFunction, Request, RequestHandler, Response } from 'express';
import { Counter, Gauge, Histogram, type Registry } from 'prom-client';
import { QUERY_CHANNEL, readGateStats, type QueryFinished } from '../queries/index.ts';

// From a 10 ms chart to a 30 s query that an overloaded ClickHouse still answers (the client's timeout is longer).
// HoldscopeQueriesSlow pages when the p95 exceeds 2 s: histogram_quantile interpolates inside a bucket, so 2 is a
// bound of its own, with bounds close on either side (1.5, 3), and "over 2 s" is read from counts, not guessed.
const SECONDS_BUCKETS = [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 1.5, 2, 3, 5, 10, 30];

/**
 * How long the HTTP server's requests and the named queries behind them take, for the on-call page's own health: when
 * /api/flags is slow during an incident, the per-query histogram says which of its queries is (docs/runbooks.md,
 * HoldscopeQueriesSlow). Labels stay bounded: the route pattern (never the request id in a path), the status code
 * and the query's name.
 */
export interface RequestMetrics {
  /** Express middleware timing each request from arrival to the end of its response. */
  middleware: RequestHandler;
  /** Stops timing queries (the HTTP server is closing). */
  close(): void;
}

/** A metric of this name already in the registry (a second server sharing it), else a new one. */
function histogram(registry: Registry, name: string, help: string, labelNames: string[]): Histogram {
  const existing = registry.getSingleMetric(name);
  if (existing) return existing as Histogram;
  return new Histogram({ name, help, labelNames, buckets: SECONDS_BUCKETS, registers: [registry] });
}

/**
 * The read gate's state (queries/read-gate.ts), read at each scrape: reads running and waiting for a turn, and those
 * refused with 503 because the queue was full. Refusals mean the pages ask for more than ClickHouse is allowed to run:
 * fewer viewers, narrower ranges, or more `maxConcurrentReads` on a server with room.
 */
function registerReadGateMetrics(registry: Registry): void {
  if (registry.getSingleMetric('holdscope_read_queries_running')) return;
  new Gauge({
    name: 'holdscope_read_queries_running',
    help: 'Named read queries running in ClickHouse now (at most maxConcurrentReads)',
    registers: [registry],
    collect() {
      this.set(readGateStats().running);
    },
  });
  new Gauge({
    name: 'holdscope_read_queries_waiting',
    help: 'Named read queries waiting for a turn (at most maxQueuedReads)',
    registers: [registry],
    collect() {
      this.set(readGateStats().waiting);
    },
  });
  new Counter({
    name: 'holdscope_read_queries_refused_total',
    help: 'Named read queries refused (503) because maxQueuedReads were already waiting',
    registers: [registry],
    collect() {
      this.reset();
      this.inc(readGateStats().refused);
    },
  });
}

/** Per registry, its query histogram's subscription and how many servers share it: a query is observed once per registry. */
const subscriptions = new WeakMap<Registry, { users: number; onQuery: (message: unknown) => void }>();

function subscribeOnce(registry: Registry, queries: Histogram): () => void {
  let entry = subscriptions.get(registry);
  if (!entry) {
    const onQuery = (message: unknown) => {
      const q = message as QueryFinished;
      queries.observe({ query: q.name, outcome: q.ok ? 'ok' : 'error' }, q.seconds);
    };
    entry = { users: 0, onQuery };
    subscriptions.set(registry, entry);
    diagnosticsChannel.subscribe(QUERY_CHANNEL, onQuery);
  }
  entry.users++;
  const shared = entry;
  return () => {
    if (--shared.users > 0) return;
    diagnosticsChannel.unsubscribe(QUERY_CHANNEL, shared.onQuery);
    subscriptions.delete(registry);
  };
}

export function createRequestMetrics(registry: Registry): RequestMetrics {
  const requests = histogram(
    registry,
    'holdscope_http_request_duration_seconds',
    'Requests to the holdscope read API and pages by route pattern and status code, from arrival to the end of the response',
    ['route', 'status'],
  );
  const queries = histogram(
    registry,
    'holdscope_query_duration_seconds',
    'Named queries (queries/sql) this process ran, by name and outcome (ok or error), from sending to parsed rows',
    ['query', 'outcome'],
  );
  registerReadGateMetrics(registry);
  const release = subscribeOnce(registry, queries);
  let closed = false;
  return {
    middleware: (req: Request, res: Response, next: NextFunction) => {
      const stop = requests.startTimer();
      res.once('finish', () => {
        // Static files and unknown paths match no route: one label for all of them, not one per path.
        const route = req.route ? `${req.baseUrl}${String(req.route.path)}` : '(no route)';
        stop({ route, status: String(res.statusCode) });
      });
      next();
    },
    close: () => {
      if (closed) return;
      closed = true;
      release();
    },
  };
}
