import {
  declaredEncoding,
  decodeOtlpJson,
  decodeOtlpProtobuf,
  forEachSpan,
  MessageEncoding,
  validateSpan,
  type MessageHeaders,
  type OtlpTraceRequest,
  type PdEvent,
  type SpanTimeWindow,
} from '../contract/index.ts';
import { InputError } from '../common/index.ts';

export interface DecodedMessage {
  events: PdEvent[];
  notOurs: number;
  invalid: { spanName: string; field: string; reason: string }[];
}

const OPEN_BRACE = 0x7b;
/** The tag of an ExportTraceServiceRequest's field 1 (resource_spans, length-delimited): a protobuf request's first byte. */
const RESOURCE_SPANS_TAG = 0x0a;
const isJsonWhitespace = (byte: number | undefined) => byte === 0x20 || byte === 0x0a || byte === 0x0d || byte === 0x09;

/**
 * A Kafka message value as holdscope's collector or the OpenTelemetry Collector's Kafka exporter writes it: an
 * ExportTraceServiceRequest in protobuf (`otlp_proto`) or JSON (`otlp_json`). The encoding the headers declare
 * (contract/kafka-message.ts) is the encoding: the message is decoded as that or not at all. Without one (the
 * OpenTelemetry Collector's exporter writes no header), the bytes tell:
 *
 * - A JSON request is optional whitespace, then `{`. Anything else is protobuf.
 * - A protobuf request starts with 0x0a (field 1's tag), then its first ResourceSpans' length as a varint. That
 *   byte may itself be JSON whitespace (lengths 9, 10, 13, 32) or `{` (123), and 0x0a is a newline: such a message
 *   looks like JSON by its first bytes. Only a message starting with 0x0a can be either, and for it the whole value
 *   decides: JSON if it parses as JSON, else protobuf. Parsing as JSON first, not protobuf, because JSON's grammar is
 *   the strict one: a protobuf request's bytes are full of control characters JSON forbids (the tags 0x0a, 0x12,
 *   0x1a of ResourceSpans' fields, every length below 32), while a protobuf decoder skips fields it does not know,
 *   so JSON text can pass for protobuf, and would then silently decode to no spans.
 */
export function decodeMessage(value: Buffer, headers?: MessageHeaders): OtlpTraceRequest {
  const declared = declaredEncoding(headers);
  if (declared === MessageEncoding.otlpProto) return decodeOtlpProtobuf(value);
  if (declared === MessageEncoding.otlpJson) return decodeOtlpJson(value);
  let i = 0;
  while (i < value.length && isJsonWhitespace(value[i])) i++;
  if (value[i] !== OPEN_BRACE) return decodeOtlpProtobuf(value);
  if (value[0] !== RESOURCE_SPANS_TAG) return decodeOtlpJson(value);
  let doc: unknown;
  try {
    doc = JSON.parse(value.toString('utf8'));
  } catch {
    return decodeOtlpProtobuf(value);
  }
  return decodeOtlpJson(doc);
}

/**
 * Decodes and validates one message; an undecodable one is an InputError for the caller to dead-letter. With a
 * `window`, spans outside it (a receiver's clock skew and retention) are invalid too.
 */
export function eventsOf(value: Buffer, headers?: MessageHeaders, window?: SpanTimeWindow): DecodedMessage {
  const out: DecodedMessage = { events: [], notOurs: 0, invalid: [] };
  let request: OtlpTraceRequest;
  try {
    request = decodeMessage(value, headers);
  } catch (error) {
    throw error instanceof InputError ? error : new InputError(`undecodable message: ${(error as Error).message}`);
  }
  forEachSpan(request, (span, resource) => {
    const result = validateSpan(span, resource, window);
    if (result.status === 'valid') out.events.push(result.event);
    else if (result.status === 'not_ours') out.notOurs++;
    else out.invalid.push({ spanName: result.spanName, field: result.field, reason: result.reason });
  });
  return out;
}
