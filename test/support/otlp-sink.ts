// A plain OTLP/HTTP sink for tests and the bench: it records what an exporter sends (the simulator's spans) with
// none of the collector's limits, validation or Kafka. Not part of holdscope's own data path.
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createGunzip } from 'node:zlib';
import { decodeOtlpJson, decodeOtlpProtobuf, type OtlpTraceRequest } from '../../contract/index.ts';
import { InputError } from '../../common/index.ts';

export interface OtlpReceiverOptions {
  port: number;
  host?: string;
  /** Largest accepted body after decompression, in bytes (default 16 MiB). */
  maxBodyBytes?: number;
  /** Called with each decoded request; the sender gets 200 only after it resolves. */
  onRequest: (request: OtlpTraceRequest) => Promise<void> | void;
}

export interface OtlpReceiver {
  url: string;
  port: number;
  close(): Promise<void>;
}

class HttpError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

function readBody(req: IncomingMessage, limit: number): Promise<Buffer> {
  const encoding = (req.headers['content-encoding'] ?? 'identity').toLowerCase();
  if (encoding !== 'identity' && encoding !== 'gzip') return Promise.reject(new HttpError(415, `unsupported Content-Encoding ${encoding}`));
  const source = encoding === 'gzip' ? req.pipe(createGunzip()) : req;
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    source.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size > limit) {
        source.destroy();
        reject(new HttpError(413, `body larger than ${limit} bytes`));
        return;
      }
      chunks.push(chunk);
    });
    source.on('end', () => resolve(Buffer.concat(chunks)));
    source.on('error', (error) => reject(new HttpError(400, `unreadable body: ${error.message}`)));
  });
}

function answer(res: ServerResponse, status: number, json: boolean, message?: string): void {
  if (json || status !== 200) {
    res.writeHead(status, { 'content-type': 'application/json' });
    res.end(JSON.stringify(status === 200 ? {} : { code: status, message }));
    return;
  }
  // An empty protobuf message is a valid ExportTraceServiceResponse with no partial success.
  res.writeHead(200, { 'content-type': 'application/x-protobuf' });
  res.end();
}

/**
 * A minimal OTLP/HTTP trace receiver: decodes protobuf or JSON (optionally gzipped) and hands each request
 * to `onRequest`, answering only after it returns. The full collector builds on it.
 */
export async function startOtlpReceiver(options: OtlpReceiverOptions): Promise<OtlpReceiver> {
  const limit = options.maxBodyBytes ?? 16 * 1024 * 1024;
  const server: Server = createServer((req, res) => {
    const type = (req.headers['content-type'] ?? '').split(';')[0]?.trim().toLowerCase() ?? '';
    const json = type === 'application/json';
    if (req.method !== 'POST' || req.url?.split('?')[0] !== '/v1/traces') {
      answer(res, 404, true, 'POST /v1/traces only');
      return;
    }
    if (!json && type !== 'application/x-protobuf') {
      req.resume();
      answer(res, 415, true, `unsupported Content-Type ${type || '(none)'}`);
      return;
    }
    readBody(req, limit)
      .then((body) => (json ? decodeOtlpJson(body.toString('utf8')) : decodeOtlpProtobuf(body)))
      .then((request) => options.onRequest(request))
      .then(() => answer(res, 200, json))
      .catch((error: unknown) => {
        if (error instanceof HttpError) answer(res, error.status, true, error.message);
        else if (error instanceof InputError) answer(res, 400, true, error.message);
        else answer(res, 503, true, error instanceof Error ? error.message : String(error));
      });
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port, options.host ?? '127.0.0.1', () => resolve());
  });
  const { port } = server.address() as AddressInfo;
  return {
    port,
    url: `http://${options.host ?? '127.0.0.1'}:${port}`,
    close: () =>
      new Promise((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
