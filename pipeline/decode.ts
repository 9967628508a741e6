import { decodeOtlpJson, decodeOtlpProtobuf, forEachSpan, validateSpan, type OtlpTraceRequest, type PdEvent } from '../contract/index.ts';
import { InputError } from '../common/index.ts';

export interface DecodedMessage {
  events: PdEvent[];
  notOurs: number;
  invalid: { spanName: string; field: string; reason: string }[];
}

const OPEN_BRACE = 0x7b;

/**
 * A Kafka message value as holdscope's collector or the OpenTelemetry Collector's Kafka exporter writes it:
 * an ExportTraceServiceRequest in protobuf (`otlp_proto`) or JSON (`otlp_json`). The encoding is told by the
 * first byte: JSON opens with `{` (after optional whitespace), a protobuf request with field 1's tag 0x0a.
 */
export function decodeMessage(value: Buffer): OtlpTraceRequest {
  let i = 0;
  while (i < value.length && (value[i] === 0x20 || value[i] === 0x0a || value[i] === 0x0d || value[i] === 0x09)) i++;
  if (value[i] === OPEN_BRACE) return decodeOtlpJson(value);
  return decodeOtlpProtobuf(value);
}

/** Decodes and validates one message; an undecodable one is an InputError for the caller to dead-letter. */
export function eventsOf(value: Buffer): DecodedMessage {
  const out: DecodedMessage = { events: [], notOurs: 0, invalid: [] };
  let request: OtlpTraceRequest;
  try {
    request = decodeMessage(value);
  } catch (error) {
    throw error instanceof InputError ? error : new InputError(`undecodable message: ${(error as Error).message}`);
  }
  forEachSpan(request, (span, resource) => {
    const result = validateSpan(span, resource);
    if (result.status === 'valid') out.events.push(result.event);
    else if (result.status === 'not_ours') out.notOurs++;
    else out.invalid.push({ spanName: result.spanName, field: result.field, reason: result.reason });
  });
  return out;
}
