import express, { type Request, type Response } from 'express';
import { InputError, type ClickHouseClient } from '../common/index.ts';
import {
  compareArms,
  adviceWindow,
  adviseHoldTimeouts,
  computeFlags,
  DEFAULT_READ_LIMITS,
  getQuery,
  listIncidents,
  listQueries,
  parseCompareRequest,
  parseTarget,
  readWindow,
  runQuery,
  runQueryCapped,
  VIOLATION_ALERT_NAMES,
  type FlagThresholds,
  type ReadLimits,
} from '../queries/index.ts';
import { headingAnchor } from './pages/markdown.ts';

/**
 * Rows a named query answers over HTTP unless `max_rows` says otherwise (`truncated` tells when there were more): a
 * flag's evidence link over a day of an abort storm would otherwise be hundreds of MB of JSON, built in the read
 * API's memory and the browser's. The CLI (`holdscope query`) has no cap.
 */
export const DEFAULT_QUERY_ROWS = 10_000;
/** The most `max_rows` may ask for. */
export const MAX_QUERY_ROWS = 1_000_000;

/**
 * The most request ids one `/api/lifecycles` lookup takes: each id travels in the URL, and Node refuses a request
 * line and headers over 16 KiB (431), which about 300 ids of 40 characters would reach.
 */
export const MAX_LOOKUP_REQUEST_IDS = 200;

/**
 * The range of /api/flags and /api/incidents when `from` or `to` is not given: a missing `to` is now, a missing `from`
 * this long before `to`. @default 15 minutes: the window of the lifecycle gauges the alerts fire on
 * (docs/runbooks.md), so "see /api/flags" from an alert, followed as written, shows what the alert saw rather than a
 * 400; the page asks with its own range.
 */
export const DEFAULT_FLAG_WINDOW_MS = 15 * 60_000;

/** Query-string values as strings: repeated keys and nested objects are refused, not guessed at. */
export function stringParams(query: Request['query']): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [key, value] of Object.entries(query)) {
    if (typeof value !== 'string') throw new InputError(`parameter ${JSON.stringify(key)} must be given once, as a plain value`);
    out[key] = value;
  }
  return out;
}

export interface ReadApiOptions {
  client: ClickHouseClient;
  database: string;
  /** Detection thresholds (defaults of flagThresholdsSchema when absent). */
  flagThresholds?: FlagThresholds;
  /** The widest range, time, memory and concurrency of every read (DEFAULT_READ_LIMITS when absent). */
  readLimits?: ReadLimits;
}

/** The request ids and cluster of a batch lookup (`request_id` repeated), or an InputError saying what is wrong. */
function lookupParams(query: Request['query']): { ids: string[]; cluster: string } {
  const { request_id: given, cluster = '', ...rest } = query;
  if (Object.keys(rest).length > 0) {
    throw new InputError(`unknown parameter(s) ${Object.keys(rest).join(', ')}; /api/lifecycles takes request_id (repeated) and cluster`);
  }
  if (typeof cluster !== 'string') throw new InputError('parameter "cluster" must be given once, as a plain value');
  const ids =
    typeof given === 'string'
      ? [given]
      : Array.isArray(given) && given.every((id) => typeof id === 'string')
        ? (given as string[])
        : undefined;
  if (!ids || ids.length === 0) throw new InputError('request_id is required: one or more plain values (request_id=a&request_id=b)');
  if (ids.length > MAX_LOOKUP_REQUEST_IDS)
    throw new InputError(`at most ${MAX_LOOKUP_REQUEST_IDS} request ids per lookup, got ${ids.length}`);
  return { ids, cluster };
}

/**
 * The JSON read API over the lifecycle records. Read-only: it runs only the named queries of queries/sql. Routes throw:
 * Express 5 hands a rejected handler's error to the HTTP foundation's one error handler (common/http.ts).
 */
export function createReadApi({ client, database, flagThresholds, readLimits = DEFAULT_READ_LIMITS }: ReadApiOptions): express.Router {
  const router = express.Router();
  const read = { limits: readLimits };
  // Many ids in one read: a script following up an incident's list of requests, or a poller, pays the view's
  // planning once rather than per id.
  router.get('/api/lifecycles', async (req: Request, res: Response) => {
    const { ids, cluster } = lookupParams(req.query);
    const lifecycles = await runQuery<{ request_id: string }>(
      client,
      database,
      'lifecycles_by_requests',
      { request_ids: ids, cluster },
      read,
    );
    const found = new Set(lifecycles.map((l) => l.request_id));
    res.json({ lifecycles, not_found: [...new Set(ids)].filter((id) => !found.has(id)) });
  });
  router.get('/api/lifecycles/:requestId', async (req: Request, res: Response) => {
    const requestId = String(req.params.requestId);
    const cluster = typeof req.query.cluster === 'string' ? req.query.cluster : '';
    const lifecycles = await runQuery(client, database, 'lifecycles_by_request', { request_id: requestId, cluster }, read);
    if (lifecycles.length === 0) {
      res.status(404).json({ error: `no lifecycle of request id ${JSON.stringify(requestId)}`, request_id: requestId });
      return;
    }
    res.json({ request_id: requestId, lifecycles });
  });
  router.get('/api/flags', async (req: Request, res: Response) => {
    const { from, to, cluster, limit_per_kind: limit, ...rest } = stringParams(req.query);
    if (Object.keys(rest).length > 0)
      throw new InputError(`unknown parameter(s) ${Object.keys(rest).join(', ')}; /api/flags takes from, to, cluster, limit_per_kind`);
    const window = readWindow(from, to, readLimits, { defaultMs: DEFAULT_FLAG_WINDOW_MS });
    if (limit !== undefined && !/^[1-9]\d{0,4}$/.test(limit))
      throw new InputError(`limit_per_kind: expected an integer from 1 to 99999, got ${JSON.stringify(limit)}`);
    const report = await computeFlags(client, database, { from: window.from, to: window.to, cluster }, flagThresholds, {
      limitPerKind: limit === undefined ? undefined : Number(limit),
      limits: readLimits,
    });
    res.json({ from: window.from, to: window.to, flags: report.flags, totals: report.totals, limit_per_kind: report.limitPerKind });
  });
  // The violations of the range grouped by cluster, kind and culprit: what the page lists first and the violation
  // alerts are (queries/incidents.ts); an alert's link opens the page on the incident's window.
  router.get('/api/incidents', async (req: Request, res: Response) => {
    const { from, to, cluster, ...rest } = stringParams(req.query);
    if (Object.keys(rest).length > 0)
      throw new InputError(`unknown parameter(s) ${Object.keys(rest).join(', ')}; /api/incidents takes from, to, cluster`);
    const window = readWindow(from, to, readLimits, { defaultMs: DEFAULT_FLAG_WINDOW_MS });
    const report = await listIncidents(client, database, { from: window.from, to: window.to, cluster }, { limits: readLimits });
    // Each with the alert it raises and that alert's runbook section, so the page links the same place the alert does.
    const incidents = report.incidents.map((incident) => {
      const alertname = VIOLATION_ALERT_NAMES[incident.kind];
      return { ...incident, alertname, runbook: `/runbooks#${headingAnchor(alertname)}` };
    });
    res.json({ from: window.from, to: window.to, incidents, total: report.total });
  });
  // Two arms of held records compared per metric (queries/compare.ts): `baseline.KEY`, `candidate.KEY`, `both.KEY` or
  // `rollout_at` and `window`, parsed by the same function as `holdscope compare`; an unknown key is a 400 naming it.
  router.get('/api/compare', async (req: Request, res: Response) => {
    const request = parseCompareRequest(stringParams(req.query), readLimits);
    res.json(await compareArms(client, database, request, { thresholds: flagThresholds, limits: readLimits }));
  });
  // The hold-timeout advice (queries/advice.ts): per pairing and decode engine, the timeout for a target probability
  // of a write landing after release, its interval and its cost in KV.
  router.get('/api/advice', async (req: Request, res: Response) => {
    const { from, to, cluster, target, ...rest } = stringParams(req.query);
    if (Object.keys(rest).length > 0)
      throw new InputError(`unknown parameter(s) ${Object.keys(rest).join(', ')}; /api/advice takes from, to, cluster, target`);
    const window = adviceWindow(from, to, readLimits);
    const probability = parseTarget(target);
    const options = { target: probability, thresholds: flagThresholds, limits: readLimits };
    res.json(await adviseHoldTimeouts(client, database, { ...window, cluster }, options));
  });
  router.get('/api/queries', (_req, res) => {
    res.json({ queries: [...listQueries().values()].map(({ name, purpose, params, columns }) => ({ name, purpose, params, columns })) });
  });
  router.get('/api/queries/:name', async (req: Request, res: Response) => {
    getQuery(String(req.params.name));
    const { max_rows: maxRowsText, ...params } = stringParams(req.query);
    if (maxRowsText !== undefined && !(/^[1-9]\d{0,6}$/.test(maxRowsText) && Number(maxRowsText) <= MAX_QUERY_ROWS)) {
      throw new InputError(`max_rows: expected an integer from 1 to ${MAX_QUERY_ROWS}, got ${JSON.stringify(maxRowsText)}`);
    }
    const maxRows = maxRowsText === undefined ? DEFAULT_QUERY_ROWS : Number(maxRowsText);
    const { rows, truncated } = await runQueryCapped(client, database, String(req.params.name), params, maxRows, read);
    res.json({ rows, truncated, max_rows: maxRows });
  });
  return router;
}
