export * from './names.ts';
export type * from './events.ts';
export type { AttrMap, AttrValue, OtlpResourceSpans, OtlpScopeSpans, OtlpSpan, OtlpTraceRequest } from './otlp-model.ts';
export { countSpans, forEachSpan } from './otlp-model.ts';
export { validateSpan } from './validate.ts';
export { formatLifecycleKey, partitionKey } from './key.ts';
export { decodeOtlpProtobuf, encodeOtlpProtobuf } from './otlp-proto.ts';
export { decodeOtlpJson, encodeOtlpJson } from './otlp-json.ts';
