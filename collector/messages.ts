import {
  encodeOtlpJson,
  encodeOtlpProtobuf,
  partitionKey,
  validateSpan,
  type AttrMap,
  type AttrValue,
  type OtlpScopeSpans,
  type OtlpSpan,
  type OtlpTraceRequest,
} from '../contract/index.ts';

/**
 * A Kafka message of the `pd-spans` topic: an OTLP ExportTraceServiceRequest (protobuf) holding the spans of
 * one request id, keyed `cluster/request id` so every span of a lifecycle, across engines and generations,
 * lands in one partition. OTLP protobuf is what the OpenTelemetry Collector's Kafka exporter writes too
 * (`otlp_proto`), so existing tools read the topic as it is.
 */
export interface SpanMessage {
  key: string;
  value: Buffer;
  spans: number;
}

/** A rejected PD span on its way to the dead-letter topic (JSON: the reason and the span as OTLP/JSON). */
export interface DeadLetter {
  key: string | null;
  value: Buffer;
}

export interface Rejection {
  spanName: string;
  field: string;
  reason: string;
}

export interface Triage {
  received: number;
  notOurs: number;
  accepted: number;
  messages: SpanMessage[];
  rejections: Rejection[];
  deadLetters: DeadLetter[];
}

export interface TriageLimits {
  maxAttributeLength: number;
}

export const MESSAGE_HEADERS = { 'content-type': 'application/x-protobuf', 'holdscope-encoding': 'otlp_proto' } as const;

function tooLong(attrs: AttrMap, limit: number): string | undefined {
  for (const key in attrs) {
    const value: AttrValue = attrs[key] as AttrValue;
    if ((typeof value === 'string' || Array.isArray(value)) && value.length > limit) return key;
  }
  return undefined;
}

const clusterOf = (resource: AttrMap) => (typeof resource['pd.cluster'] === 'string' ? (resource['pd.cluster'] as string) : 'default');

function singleSpanRequest(resource: AttrMap, scope: OtlpScopeSpans['scope'], span: OtlpSpan): OtlpTraceRequest {
  return { resourceSpans: [{ resource, scopeSpans: [{ scope, spans: [span] }] }] };
}

/** Splits one OTLP request into Kafka messages per lifecycle key, rejections, and spans that are not ours. */
export function triage(request: OtlpTraceRequest, limits: TriageLimits, receivedAt = new Date()): Triage {
  const out: Triage = { received: 0, notOurs: 0, accepted: 0, messages: [], rejections: [], deadLetters: [] };
  // key -> resource -> scope -> spans, so each message keeps the spans' own resource and scope.
  const byKey = new Map<string, Map<AttrMap, Map<OtlpScopeSpans['scope'], OtlpSpan[]>>>();
  for (const rs of request.resourceSpans) {
    const longResourceKey = tooLong(rs.resource, limits.maxAttributeLength);
    for (const ss of rs.scopeSpans) {
      for (const span of ss.spans) {
        out.received++;
        const result = validateSpan(span, rs.resource);
        if (result.status === 'not_ours') {
          out.notOurs++;
          continue;
        }
        let rejection: Rejection | undefined = result.status === 'invalid' ? { spanName: result.spanName, field: result.field, reason: result.reason } : undefined;
        const longKey = longResourceKey ?? tooLong(span.attributes, limits.maxAttributeLength);
        if (!rejection && longKey !== undefined) {
          rejection = { spanName: span.name, field: 'attribute_length', reason: `${longKey}: longer than the attribute length limit of ${limits.maxAttributeLength}` };
        }
        if (rejection) {
          out.rejections.push(rejection);
          const requestId = span.attributes['pd.request.id'];
          out.deadLetters.push({
            key: typeof requestId === 'string' ? partitionKey(clusterOf(rs.resource), requestId) : null,
            value: Buffer.from(
              JSON.stringify({
                reason: rejection.reason,
                field: rejection.field,
                span_name: span.name,
                received_at: receivedAt.toISOString(),
                otlp: JSON.parse(encodeOtlpJson(singleSpanRequest(rs.resource, ss.scope, span))),
              }),
            ),
          });
          continue;
        }
        out.accepted++;
        const key = partitionKey(clusterOf(rs.resource), span.attributes['pd.request.id'] as string);
        const byResource = byKey.get(key) ?? new Map();
        byKey.set(key, byResource);
        const byScope = byResource.get(rs.resource) ?? new Map();
        byResource.set(rs.resource, byScope);
        const spans = byScope.get(ss.scope) ?? [];
        byScope.set(ss.scope, spans);
        spans.push(span);
      }
    }
  }
  for (const [key, byResource] of byKey) {
    let spans = 0;
    const message: OtlpTraceRequest = { resourceSpans: [] };
    for (const [resource, byScope] of byResource) {
      const scopeSpans: OtlpScopeSpans[] = [];
      for (const [scope, list] of byScope) {
        scopeSpans.push({ scope, spans: list });
        spans += list.length;
      }
      message.resourceSpans.push({ resource, scopeSpans });
    }
    out.messages.push({ key, value: Buffer.from(encodeOtlpProtobuf(message)), spans });
  }
  return out;
}

/** The partial-success message for rejected spans: the count and the first few reasons. */
export function rejectionSummary(rejections: Rejection[], shown = 3): string {
  const first = rejections.slice(0, shown).map((r) => `${r.spanName}: ${r.reason}`);
  const more = rejections.length > shown ? ` (and ${rejections.length - shown} more)` : '';
  return `${rejections.length} PD span(s) rejected: ${first.join('; ')}${more}`;
}
