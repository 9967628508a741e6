export * from './names.ts';
export type * from './events.ts';
export type { AttrMap, AttrValue, OtlpResourceSpans, OtlpScopeSpans, OtlpSpan, OtlpTraceRequest } from './otlp-model.ts';
export { forEachSpan } from './otlp-model.ts';
export { validateSpan } from './validate.ts';
export { spanTimeKeys, spanTimeWindow, type SpanTimeWindow } from './limits.ts';
export { lifecycleKeyId, partitionKey } from './key.ts';
export { decodeOtlpProtobuf, decodeOtlpProtobufBounded } from './otlp-decode.ts';
export {
  assembleOtlpProtobuf,
  encodeOtlpProtobuf,
  encodeOtlpResource,
  encodeOtlpScope,
  encodeOtlpSpan,
  type EncodedResourceSpans,
} from './otlp-encode.ts';
export { clipText, LimitError, type BoundedDecode, type Cut, type DecodeLimits } from './otlp-limits.ts';
export { decodeOtlpJson, decodeOtlpJsonBounded, encodeOtlpJson } from './otlp-json.ts';
export {
  DEAD_LETTER_HEADERS,
  declaredEncoding,
  MESSAGE_HEADERS,
  MessageEncoding,
  type MessageHeaders,
  type DeadLetter,
  type SpanMessage,
  type SpanQueue,
} from './kafka-message.ts';
