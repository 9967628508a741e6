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
  // An INSERT may touch any number of partitions (days: spans are PARTITION BY toYYYYMMDD(start_time), the records
  // by their bucket's day): the default 100 made one request spanning 150 days fail with TOO_MANY_PARTS, which is
  // retriable, so the writer retried it for ever and its partition stalled. '0' is no limit (a string, as the client
  // types UInt64 settings). The insert blocks of the materialized views and of the record refreshes' INSERT ... SELECTs
  // run with the query's settings, so this covers them too. What bounds the days is the contract (contract/limits.ts).
  max_partitions_per_insert_block: '0',
} as const;

/**
 * One @clickhouse/client for either kind of ClickHouse. chdb keeps one process per data directory: a second
 * process on the same directory fails with code 76 (CANNOT_OPEN_FILE), reported as a non-retriable error.
 */
export async function createClickHouse(connection: ClickHouseConnection): Promise<ClickHouseClient> {
  // The client's own logger writes multi-line text dumps beside our JSON logs; every failure reaches a caller
  // as an error anyway, and is logged there with what it means.
  const common = {
    request_timeout: connection.requestTimeoutMs ?? 60_000,
    clickhouse_settings: CLICKHOUSE_SETTINGS,
    log: { level: ClickHouseLogLevel.OFF },
  };
  if (connection.url) {
    return createClient({ url: connection.url, username: connection.user ?? 'default', password: connection.password ?? '', ...common });
  }
  const { createChdbConnection } = await import('chdb/connection');
  const client = createClient({ connection: createChdbConnection({ path: connection.dataPath }), ...common } as Parameters<
    typeof createClient
  >[0]);
  embeddedClients.add(client);
  return client;
}

const embeddedClients = new WeakSet<ClickHouseClient>();

/**
 * Whether an INSERT's body reaches ClickHouse as bytes. Not on embedded ClickHouse: chdb's connection (chdb 3.4)
 * appends the body to the statement as UTF-8 text, which a binary format such as Native does not survive.
 */
export const insertsBinaryBodies = (client: ClickHouseClient): boolean => !embeddedClients.has(client);

/**
 * What a failed ClickHouse call says, told by ClickHouse error code only (a message's wording is not an interface):
 *
 * | kind        | what failed                                              | codes              | the span writer                       |
 * | ----------- | -------------------------------------------------------- | ------------------ | ------------------------------------- |
 * | `transient` | no server answer (refused, reset, timed out, unparsable  | TRANSIENT_CODES    | retries with backoff and jitter:      |
 * |             | reply), or the server is busy, restarting or short of a  |                    | nothing dropped, nothing committed    |
 * |             | resource for now                                         |                    |                                       |
 * | `setup`     | the server's configuration or holdscope's schema, not    | SETUP_CODES        | retries too, logging errors: the rows |
 * |             | the data: the same call succeeds once an operator acts   |                    | are not at fault (splitting the batch |
 * |             |                                                          |                    | would dead-letter every one)          |
 * | `content`   | anything else a server answers: the statement or the     | every other code   | splits the batch until the refused    |
 * |             | data it carries; for an INSERT of fixed columns, the rows|                    | rows are found; dead-letters them     |
 *
 * `classifyClickHouseError` makes only `transient` failures retriable: for a query or a migration a `setup` failure is
 * as final as a bad statement until someone acts (the CLI exits with the message, the read API answers 500).
 */
export type ClickHouseFailureKind = 'transient' | 'setup' | 'content';

// The server answered, but the same statement may succeed later: it is busy, restarting, or short of a resource.
const TRANSIENT_CODES = new Set([
  '74', // CANNOT_READ_FROM_FILE_DESCRIPTOR (the server's socket or disk read failed)
  '75', // CANNOT_WRITE_TO_FILE_DESCRIPTOR
  '159', // TIMEOUT_EXCEEDED
  '160', // TOO_SLOW
  '164', // READONLY (a replica catching up)
  '173', // CANNOT_ALLOCATE_MEMORY
  '201', // QUOTA_EXCEEDED (until the quota's interval ends)
  '202', // TOO_MANY_SIMULTANEOUS_QUERIES
  '203', // NO_FREE_CONNECTION
  '209', // SOCKET_TIMEOUT
  '210', // NETWORK_ERROR
  '225', // NO_ZOOKEEPER
  '236', // ABORTED
  '241', // MEMORY_LIMIT_EXCEEDED
  '242', // TABLE_IS_READ_ONLY
  // TOO_MANY_PARTS: merges are behind. Also what an INSERT spanning more partitions than max_partitions_per_insert_block
  // gets, which would be the rows' doing: CLICKHOUSE_SETTINGS lifts that limit.
  '252',
  '279', // ALL_CONNECTION_TRIES_FAILED
  '285', // TOO_FEW_LIVE_REPLICAS
  '286', // UNSATISFIED_QUORUM_FOR_PREVIOUS_WRITE
  '319', // UNKNOWN_STATUS_OF_INSERT
  '369', // ALL_REPLICAS_ARE_STALE
  '373', // SESSION_IS_LOCKED
  '394', // QUERY_WAS_CANCELLED (a server shutting down)
  '425', // SYSTEM_ERROR
  '439', // CANNOT_SCHEDULE_TASK (thread pools full)
  '473', // DEADLOCK_AVOIDED
  '733', // TABLE_IS_BEING_RESTARTED
  '999', // KEEPER_EXCEPTION
  '1000', // POCO_EXCEPTION (the server's own network and file library)
]);

// The server answered about its configuration or holdscope's schema, not about the statement's data.
const SETUP_CODES = new Set([
  '16', // NO_SUCH_COLUMN_IN_TABLE (a schema older than the code: `holdscope migrate`)
  '46', // UNKNOWN_FUNCTION (a server older than the SQL)
  '47', // UNKNOWN_IDENTIFIER
  '60', // UNKNOWN_TABLE
  '76', // CANNOT_OPEN_FILE (embedded ClickHouse: another process holds the data directory)
  '81', // UNKNOWN_DATABASE
  '115', // UNKNOWN_SETTING
  '192', // UNKNOWN_USER
  '193', // WRONG_PASSWORD
  '194', // REQUIRED_PASSWORD
  '243', // NOT_ENOUGH_SPACE (a full disk)
  '291', // DATABASE_ACCESS_DENIED
  '452', // SETTING_CONSTRAINT_VIOLATION
  '497', // ACCESS_DENIED
  '516', // AUTHENTICATION_FAILED
  '701', // CLUSTER_DOESNT_EXIST
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

/** The server's answer inside `error`, also through the causes of the errors that classified it; undefined when none came. */
export function serverErrorOf(error: unknown): ClickHouseError | undefined {
  const seen = new Set<unknown>();
  for (let e: unknown = error; e instanceof Error && !seen.has(e); e = e.cause) {
    seen.add(e);
    if (isServerError(e)) return e;
  }
  return undefined;
}

/** Which of the kinds above `error` is (a ClickHouse failure, or the HoldscopeError that classified one). */
export function clickHouseFailureKind(error: unknown): ClickHouseFailureKind {
  const server = serverErrorOf(error);
  if (server) return TRANSIENT_CODES.has(server.code) ? 'transient' : SETUP_CODES.has(server.code) ? 'setup' : 'content';
  // No server answer: the transport failed, so a retry may succeed. A HoldscopeError of our own says itself.
  return error instanceof HoldscopeError && !error.retriable ? 'content' : 'transient';
}

/** Tells retriable ClickHouse failures from permanent ones (see ClickHouseFailureKind): only `transient` ones are retriable. */
export function classifyClickHouseError(error: unknown, doing: string): HoldscopeError {
  if (error instanceof HoldscopeError) return error;
  if (isServerError(error)) {
    const message = `${doing}: ClickHouse error ${error.code} (${error.type ?? 'unknown'}): ${error.message}`;
    return clickHouseFailureKind(error) === 'transient'
      ? new UnavailableError(message, { cause: error, retryAfterMs: 1000 })
      : new HoldscopeError(`CLICKHOUSE_${error.type ?? error.code}`, message, { cause: error });
  }
  // No server answer at all (refused, reset, timed out): the transport failed, so a retry may succeed.
  const code = (error as { code?: string } | undefined)?.code;
  const text = error instanceof Error ? error.message : String(error);
  return new UnavailableError(`${doing}: ClickHouse unreachable (${code ?? text})`, { cause: error, retryAfterMs: 1000 });
}
