import express, { type Request, type Response } from 'express';
import { HoldscopeError, InputError, type ClickHouseClient, type Logger } from '../common/index.ts';
import { runQuery } from '../queries/index.ts';

export interface ReadApiOptions {
  client: ClickHouseClient;
  database: string;
  log: Logger;
  /** Answers /healthz: 200 only once this says the stack accepts spans. */
  ready?: () => boolean;
}

function sendError(res: Response, log: Logger, error: unknown): void {
  if (error instanceof InputError) {
    res.status(400).json({ error: error.message });
    return;
  }
  const retriable = error instanceof HoldscopeError && error.retriable;
  log.error({ err: error instanceof Error ? error.message : String(error) }, 'read API request failed');
  if (retriable) res.setHeader('Retry-After', '5');
  res.status(retriable ? 503 : 500).json({ error: retriable ? 'ClickHouse unavailable' : 'internal error' });
}

/** The JSON read API over the lifecycle records. Read-only: it runs only the named queries of queries/sql. */
export function createReadApi({ client, database, log, ready }: ReadApiOptions): express.Router {
  const router = express.Router();
  router.get('/healthz', (_req, res) => {
    const ok = ready ? ready() : true;
    res.status(ok ? 200 : 503).json({ status: ok ? 'ok' : 'starting' });
  });
  router.get('/api/lifecycles/:requestId', async (req: Request, res: Response) => {
    try {
      const requestId = String(req.params.requestId);
      const cluster = typeof req.query.cluster === 'string' ? req.query.cluster : '';
      const lifecycles = await runQuery(client, database, 'lifecycles_by_request', { request_id: requestId, cluster });
      if (lifecycles.length === 0) {
        res.status(404).json({ error: `no lifecycle of request id ${JSON.stringify(requestId)}`, request_id: requestId });
        return;
      }
      res.json({ request_id: requestId, lifecycles });
    } catch (error) {
      sendError(res, log, error);
    }
  });
  return router;
}
