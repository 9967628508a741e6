// The generic stack, side by side: the same spans stored as the OpenTelemetry Collector's ClickHouse exporter stores
// them (`otel_traces`), and the on-call questions asked of that table in SQL, as a site running SigNoz or ClickStack
// would ask them. Neither is part of holdscope's data path: the tests check both stores give the same answers, and the
// bench times them side by side (test/bench/generic-stack.ts).
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { checkedIdentifier, InputError, type ClickHouseClient } from '../../common/index.ts';
import { pinnedRowsByEngine, judgePinnedRows, type PinnedRow } from '../distribution.ts';
import type { FlagThresholds } from '../flag-model.ts';
import { bindParams, parseQueryFile, type QueryDefinition } from '../runner.ts';

const DIR = dirname(fileURLToPath(import.meta.url));

/**
 * The four on-call questions, each with the holdscope query that answers it: its name under queries/sql and the
 * parameters that make it ask the same (the storms: kv_pinned's windows, judged by queries/storms.ts on both sides).
 */
export const GENERIC_QUESTIONS = {
  resolution_by_decode_engine: { holdscopeQuery: 'hold_resolution_groups', holdscopeParams: {} },
  transfer_tails: { holdscopeQuery: 'transfer_tails', holdscopeParams: {} },
  kv_pinned_storms: { holdscopeQuery: 'kv_pinned', holdscopeParams: {} },
  late_write_victims: { holdscopeQuery: 'late_write_victims', holdscopeParams: { writers_per_cluster: '0' } },
} as const satisfies Record<string, { holdscopeQuery: string; holdscopeParams: Record<string, string> }>;
export type GenericQuestion = keyof typeof GENERIC_QUESTIONS;
export const GENERIC_QUESTION_NAMES = Object.keys(GENERIC_QUESTIONS) as GenericQuestion[];

const readSql = (file: string) => readFileSync(join(DIR, file), 'utf8');

/** Creates the exporter's `otel_traces` table in `database` (which must exist), as the exporter creates it. */
export async function createOtelTraces(client: ClickHouseClient, database: string): Promise<void> {
  // The exporter's DDL as it is, with the database written in: checked, since it is not bound as a parameter.
  const db = checkedIdentifier('database', database);
  await client.command({ query: readSql('otel_traces.sql').replace(/\{\{db\}\}/g, db) });
}

/**
 * Fills `otel_traces` with the exporter's row of every span in `database`.spans (otel_traces_from_spans.sql says what
 * it can and cannot reproduce). Run once: a second run stores every span again, as a replay to the exporter would.
 */
export async function fillOtelTracesFromSpans(
  client: ClickHouseClient,
  database: string,
  options: { sinceIso?: string } = {},
): Promise<{ rows: number }> {
  const fill = parseQueryFile(readSql('otel_traces_from_spans.sql'), 'otel_traces_from_spans.sql');
  const since: Record<string, string> = options.sinceIso === undefined ? {} : { since: options.sinceIso };
  await client.command({ query: fill.sql, query_params: { ...bindParams(fill, since), db: database } });
  const res = await client.query({
    query: 'SELECT count() AS n FROM {db:Identifier}.otel_traces',
    query_params: { db: database },
    format: 'JSONEachRow',
  });
  return { rows: Number(((await res.json()) as { n: number | string }[])[0]?.n ?? 0) };
}

const definitions = new Map<GenericQuestion, QueryDefinition>();
function definition(question: GenericQuestion): QueryDefinition {
  let def = definitions.get(question);
  if (!def) {
    if (!(question in GENERIC_QUESTIONS))
      throw new InputError(`unknown question ${JSON.stringify(question)}; known: ${GENERIC_QUESTION_NAMES.join(', ')}`);
    def = parseQueryFile(readSql(`${question}.sql`), `${question}.sql`);
    definitions.set(question, def);
  }
  return def;
}

/** Asks `otel_traces` in `database` one of the questions, with parameters checked as a named query's are. */
export async function runGenericQuestion<T = Record<string, unknown>>(
  client: ClickHouseClient,
  database: string,
  question: GenericQuestion,
  params: Record<string, string>,
): Promise<T[]> {
  const def = definition(question);
  const res = await client.query({
    query: def.sql,
    query_params: { ...bindParams(def, params), db: database },
    format: 'JSONEachRow',
  });
  return res.json<T>();
}

/** A storm window of one decode engine and the KV slots pinned at its peak. */
export interface StormPeak {
  cluster: string;
  decode_engine: string;
  /** Epoch ms. */
  window_ms: number;
  aborts: number;
  peak_pinned_slots: number;
  capacity_slots: number;
}

/**
 * The storm windows among kv_pinned's rows (or generic_kv_pinned_storms', the same shape) of a range starting at
 * `fromMs`, judged by the one storm rule (queries/storms.ts), with their peak pinned slots: "KV pinned in storms".
 */
export function stormPeaks(rows: readonly PinnedRow[], fromMs: number, thresholds: FlagThresholds): StormPeak[] {
  return pinnedRowsByEngine(rows).flatMap((engine) =>
    judgePinnedRows(engine, fromMs, thresholds)
      .filter((v) => v.storm)
      .map(({ window }) => ({
        cluster: window.row.cluster,
        decode_engine: window.row.decode_engine,
        window_ms: window.t,
        aborts: window.aborts,
        peak_pinned_slots: Number(window.row.peak_pinned_slots),
        capacity_slots: Number(window.row.capacity_slots),
      })),
  );
}
