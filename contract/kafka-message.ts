import type { RetryableResult } from '../common/errors.ts';
/**
 * The Kafka message contract of the span topics: how a message says what its value is. holdscope's collector
 * writes each `pd-spans` message as an OTLP ExportTraceServiceRequest in protobuf and says so in two headers;
 * the OpenTelemetry Collector's Kafka exporter writes the same request (`otlp_proto`, or `otlp_json`) with no
 * header, and a reader then tells the encoding from the bytes (pipeline/decode.ts).
 */

/** The encodings of a span message, named as the OpenTelemetry Collector's Kafka exporter and receiver name them. */
export const MessageEncoding = { otlpProto: 'otlp_proto', otlpJson: 'otlp_json' } as const;
export type MessageEncoding = (typeof MessageEncoding)[keyof typeof MessageEncoding];

export const MessageHeader = {
  contentType: 'content-type',
  /** holdscope's own, naming the MessageEncoding: it wins over `content-type`. */
  encoding: 'holdscope-encoding',
} as const;

export const ContentType = { protobuf: 'application/x-protobuf', json: 'application/json' } as const;

/** The headers of every span message holdscope's collector writes. */
export const MESSAGE_HEADERS = {
  [MessageHeader.contentType]: ContentType.protobuf,
  [MessageHeader.encoding]: MessageEncoding.otlpProto,
} as const;
/** The headers of a dead letter (a rejected span with its reason, as JSON). */
export const DEAD_LETTER_HEADERS = { [MessageHeader.contentType]: ContentType.json } as const;

/** A Kafka message's headers as clients give them: kafkajs gives Buffers, and an array for a repeated header. */
export type MessageHeaders = Readonly<Record<string, string | Uint8Array | readonly (string | Uint8Array)[] | undefined>>;

// Maps, not object literals: a header value of `constructor` or `__proto__` must be unknown, not the prototype's.
const ENCODING_NAMES = new Map<string, MessageEncoding>(Object.values(MessageEncoding).map((e) => [e, e]));
const CONTENT_TYPES = new Map<string, MessageEncoding>([
  [ContentType.protobuf, MessageEncoding.otlpProto],
  ['application/protobuf', MessageEncoding.otlpProto],
  [ContentType.json, MessageEncoding.otlpJson],
]);

/** A header's value as text (the last one of a repeated header, as a later header overrides an earlier one). */
function headerText(headers: MessageHeaders, name: string): string | undefined {
  const raw = headers[name];
  const value = Array.isArray(raw) ? raw[raw.length - 1] : (raw as string | Uint8Array | undefined);
  if (value === undefined) return undefined;
  return typeof value === 'string' ? value : Buffer.from(value.buffer, value.byteOffset, value.byteLength).toString('utf8');
}

/**
 * The encoding a message's headers declare: `holdscope-encoding` when it names one, else `content-type` (its
 * parameters, such as a charset, ignored). Undefined when they declare none this contract knows: the reader
 * then tells the encoding from the bytes.
 */
export function declaredEncoding(headers: MessageHeaders | undefined): MessageEncoding | undefined {
  if (!headers) return undefined;
  const named = headerText(headers, MessageHeader.encoding)?.trim().toLowerCase();
  const encoding = named === undefined ? undefined : ENCODING_NAMES.get(named);
  if (encoding) return encoding;
  const type = headerText(headers, MessageHeader.contentType)?.split(';')[0]?.trim().toLowerCase();
  return type === undefined ? undefined : CONTENT_TYPES.get(type);
}

/**
 * A Kafka message of the `pd-spans` topic: an OTLP ExportTraceServiceRequest (protobuf) holding spans of one
 * request id, keyed `cluster/request id` so every span of a lifecycle, across engines and generations, lands
 * in one partition. OTLP protobuf is what the OpenTelemetry Collector's Kafka exporter writes too
 * (`otlp_proto`), so existing tools read the topic as it is. The spans of one id in one OTLP request make one
 * message, or several with the same key when one would exceed the message size limit. The collector's sends
 * then merge them into one message per partition (collector/partitions.ts): what lands in Kafka may hold several
 * lifecycles, each in its key's partition.
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

/**
 * Where accepted spans go. `publish` resolves once the messages are durable (success), or says when to try
 * again (retryable): it never resolves success for a message the queue does not hold.
 */
export interface SpanQueue {
  start(): Promise<void>;
  publish(messages: SpanMessage[], deadLetters: DeadLetter[]): Promise<RetryableResult<void>>;
  /** True while the queue can take spans (connected, and no send failed or timed out since Kafka last answered). */
  healthy(): boolean;
  flush(): Promise<void>;
  shutdown(): Promise<void>;
}
