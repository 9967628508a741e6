/**
 * The protobufjs schema the encoders write from: a hand-written subset of opentelemetry-proto, and the shapes
 * protobufjs encodes from. The decoder does not use it (see otlp-decode.ts), but reads the same field numbers.
 */
import protobuf from 'protobufjs';

// Field numbers are those of opentelemetry-proto (collector/trace/v1/trace_service.proto, trace/v1/trace.proto,
// resource/v1/resource.proto, common/v1/common.proto); the wire format is identical. Deliberate departures:
// - edition 2023 instead of proto3: explicit presence writes exactly the AnyValue member that is set, so
//   "" / 0 / false stay distinct from an empty AnyValue.
// - Span events (11) and links (13) are left out: the model has no place for them.
// - Enums are int32 (wire-identical), so unknown kinds and status codes pass through as numbers.
const SCHEMA = `
edition = "2023";
option features.utf8_validation = NONE;
package otlp;

message ExportTraceServiceRequest { repeated ResourceSpans resource_spans = 1; }
message ResourceSpans { Resource resource = 1; repeated ScopeSpans scope_spans = 2; string schema_url = 3; }
message Resource { repeated KeyValue attributes = 1; uint32 dropped_attributes_count = 2; }
message ScopeSpans { InstrumentationScope scope = 1; repeated Span spans = 2; string schema_url = 3; }
message InstrumentationScope {
  string name = 1; string version = 2; repeated KeyValue attributes = 3; uint32 dropped_attributes_count = 4;
}
message Span {
  bytes trace_id = 1; bytes span_id = 2; string trace_state = 3; bytes parent_span_id = 4; fixed32 flags = 16;
  string name = 5; int32 kind = 6; fixed64 start_time_unix_nano = 7; fixed64 end_time_unix_nano = 8;
  repeated KeyValue attributes = 9; uint32 dropped_attributes_count = 10;
  uint32 dropped_events_count = 12; uint32 dropped_links_count = 14; Status status = 15;
}
message Status { string message = 2; int32 code = 3; }
message KeyValue { string key = 1; AnyValue value = 2; }
message AnyValue {
  string string_value = 1; bool bool_value = 2; int64 int_value = 3; double double_value = 4;
  ArrayValue array_value = 5; KeyValueList kvlist_value = 6; bytes bytes_value = 7;
}
message ArrayValue { repeated AnyValue values = 1; }
message KeyValueList { repeated KeyValue values = 1; }
`;

const root = protobuf.parse(SCHEMA).root;
export const RequestType = root.lookupType('otlp.ExportTraceServiceRequest');
export const SpanType = root.lookupType('otlp.Span');
export const ResourceType = root.lookupType('otlp.Resource');
export const ScopeType = root.lookupType('otlp.InstrumentationScope');
// Without long.js, protobufjs writes 64-bit fields from JS numbers and would round timestamps.
if (!protobuf.util.Long) throw new Error('protobufjs cannot load its "long" dependency; 64-bit values would be rounded');

// The shapes protobufjs encodes from (camelCase names).
export interface Long64 {
  low: number;
  high: number;
}
export interface PbAnyValue {
  stringValue?: string;
  boolValue?: boolean;
  intValue?: Long64 | number;
  doubleValue?: number;
  arrayValue?: { values: PbAnyValue[] };
  kvlistValue?: { values: PbKeyValue[] };
  bytesValue?: Uint8Array;
}
export interface PbKeyValue {
  key: string;
  value?: PbAnyValue | null;
}

/** protobufjs's wire reader, for the decoder: loaded here, where 64-bit values are known to come back as exact Longs. */
export const Reader = protobuf.Reader;
