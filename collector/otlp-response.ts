import protobuf from 'protobufjs';

export type Encoding = 'protobuf' | 'json';

/**
 * ExportTraceServiceResponse: empty on full success, `partial_success` (field 1: rejected_spans = 1,
 * error_message = 2) when some spans were rejected. Encoded in the request's own encoding, per OTLP/HTTP.
 */
export function exportResponse(encoding: Encoding, rejected = 0, errorMessage = ''): Buffer {
  if (encoding === 'json') {
    return Buffer.from(JSON.stringify(rejected > 0 ? { partialSuccess: { rejectedSpans: String(rejected), errorMessage } } : {}));
  }
  if (rejected === 0) return Buffer.alloc(0);
  const inner = protobuf.Writer.create()
    .uint32((1 << 3) | 0)
    .int64(rejected)
    .uint32((2 << 3) | 2)
    .string(errorMessage)
    .finish();
  return Buffer.from(
    protobuf.Writer.create()
      .uint32((1 << 3) | 2)
      .bytes(inner)
      .finish(),
  );
}

/** google.rpc.Status (code = 1, message = 2): the body of every OTLP/HTTP error response. */
export function statusResponse(encoding: Encoding, code: number, message: string): Buffer {
  if (encoding === 'json') return Buffer.from(JSON.stringify({ code, message }));
  return Buffer.from(
    protobuf.Writer.create()
      .uint32((1 << 3) | 0)
      .int32(code)
      .uint32((2 << 3) | 2)
      .string(message)
      .finish(),
  );
}

/** gRPC status codes matching the HTTP statuses the collector answers. */
export const RpcCode = {
  invalidArgument: 3,
  resourceExhausted: 8,
  unauthenticated: 16,
  unavailable: 14,
  unimplemented: 12,
  internal: 13,
} as const;
