import { ClickHouseError, ClickHouseLogLevel, createClient, type ClickHouseClient } from '@clickhouse/client';
import { HoldscopeError, UnavailableError } from './errors.ts';

export type { ClickHouseClient };

export interface ClickHouseConnection {
  /** HTTP(S) URL of a ClickHouse server; when absent, embedded ClickHouse (chdb) stores data under `dataPath`. */
  url?: string;
  user?: string;
  password?: string;
  dataPath: string;
  requestTimeoutMs?: number;
}

/** The settings every holdscope query runs with, on a server and on chdb alike. */
export const CLICKHOUSE_SETTINGS = {
  output_format_json_quote_64bit_integers: 0,
  date_time_input_format: 'best_effort',
  // On a cluster (CLICKHOUSE_CLUSTER) an INSERT into a Distributed table is by default acknowledged once queued
  // on the node that took it, before any shard has the rows: offsets would move past rows a lost node still held,
  // and the record refresh that follows each INSERT could read the shards without them and store stale records.
  // Synchronous: acknowledged once every shard has its rows. No effect on other tables. (The pre-23.10 name, an
  // alias of distributed_foreground_insert since, so that older servers accept it too.)
  insert_distributed_sync: 1,
} as const;

/**
 * One @clickhouse/client for either kind of ClickHouse. chdb keeps one process per data directory: a second
 * process on the same directory fails with code 76 (CANNOT_OPEN_FILE), reported as a non-retriable error.
 */
export async function createClickHouse(connection: ClickHouseConnection): Promise<ClickHouseClient> {
  // The client's own logger writes multi-line text dumps beside our JSON logs; every failure reaches a caller
  // as an error anyway, and is logged there with what it means.
  const common = { request_timeout: connection.requestTimeoutMs ?? 60_000, clickhouse_settings: CLICKHOUSE_SETTINGS, log: { level: ClickHouseLogLevel.OFF } };
  if (connection.url) {
    return createClient({ url: connection.url, username: connection.user ?? 'default', password: connection.password ?? '', ...common });
  }
  const { createChdbConnection } = await import('chdb/connection');
  return createClient({ connection: createChdbConnection({ path: connection.dataPath }), ...common } as Parameters<typeof createClient>[0]);
}

// Server error codes after which the same statement may succeed (the server is busy, restarting, or short
// of a resource), as opposed to errors in the statement or its data that will fail again.
const RETRIABLE_CODES = new Set([
  '159', // TIMEOUT_EXCEEDED
  '164', // READONLY (a replica catching up)
  '202', // TOO_MANY_SIMULTANEOUS_QUERIES
  '203', // NO_FREE_CONNECTION
  '209', // SOCKET_TIMEOUT
  '210', // NETWORK_ERROR
  '241', // MEMORY_LIMIT_EXCEEDED
  '242', // TABLE_IS_READ_ONLY
  '252', // TOO_MANY_PARTS
  '285', // TOO_FEW_LIVE_REPLICAS
  '319', // UNKNOWN_STATUS_OF_INSERT
  '394', // QUERY_WAS_CANCELLED
  '425', // SYSTEM_ERROR
  '999', // KEEPER_EXCEPTION
]);

/**
 * A ClickHouse server (or chdb) error: it carries the server's numeric code. Checked by shape rather than
 * class, because chdb raises the error class of its own copy of @clickhouse/client-common.
 */
export function isServerError(error: unknown): error is ClickHouseError {
  if (error instanceof ClickHouseError) return true;
  const code = (error as { code?: unknown } | null)?.code;
  return error instanceof Error && typeof code === 'string' && /^\d+$/.test(code) && 'type' in error;
}

/** Tells retriable ClickHouse failures from permanent ones, by server error code or socket error code. */
export function classifyClickHouseError(error: unknown, doing: string): HoldscopeError {
  if (error instanceof HoldscopeError) return error;
  if (isServerError(error)) {
    const message = `${doing}: ClickHouse error ${error.code} (${error.type ?? 'unknown'}): ${error.message}`;
    return RETRIABLE_CODES.has(error.code)
      ? new UnavailableError(message, { cause: error, retryAfterMs: 1000 })
      : new HoldscopeError(`CLICKHOUSE_${error.type ?? error.code}`, message, { cause: error });
  }
  // No server answer at all (refused, reset, timed out): the transport failed, so a retry may succeed.
  const code = (error as { code?: string } | undefined)?.code;
  const text = error instanceof Error ? error.message : String(error);
  return new UnavailableError(`${doing}: ClickHouse unreachable (${code ?? text})`, { cause: error, retryAfterMs: 1000 });
}
