/**
 * OTLP trace data after decoding from protobuf or JSON, in one shape the validator and every consumer
 * share. Attribute values keep OTLP's distinctions that matter to the contract (string, bool, number,
 * array); 64-bit integers beyond 2^53 stay bigint so nothing is silently rounded.
 */
export type AttrValue = string | boolean | number | bigint | Uint8Array | null | AttrValue[] | AttrMap;
export interface AttrMap {
  [key: string]: AttrValue;
}

export interface OtlpSpan {
  /** Lower-case hex, 32 characters. */
  traceId: string;
  /** Lower-case hex, 16 characters. */
  spanId: string;
  parentSpanId: string;
  name: string;
  kind: number;
  startTimeUnixNano: bigint;
  endTimeUnixNano: bigint;
  /** Set when OTLP/JSON gave this time as a number past 2^53, whose digits the JSON parser rounded. */
  inexactTime?: 'startTimeUnixNano' | 'endTimeUnixNano';
  attributes: AttrMap;
  statusCode: number;
  statusMessage: string;
}

export interface OtlpScopeSpans {
  scope: { name: string; version: string };
  spans: OtlpSpan[];
}

export interface OtlpResourceSpans {
  resource: AttrMap;
  scopeSpans: OtlpScopeSpans[];
}

export interface OtlpTraceRequest {
  resourceSpans: OtlpResourceSpans[];
}

/** Calls `visit` for every span with its resource, in request order. */
export function forEachSpan(request: OtlpTraceRequest, visit: (span: OtlpSpan, resource: AttrMap) => void): void {
  for (const rs of request.resourceSpans) {
    for (const ss of rs.scopeSpans) {
      for (const span of ss.spans) visit(span, rs.resource);
    }
  }
}
