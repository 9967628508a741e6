import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import express from 'express';
import type { ClickHouseClient, Logger } from '../common/index.ts';
import { createReadApi } from './read-api.ts';

export interface HttpServerOptions {
  port: number;
  host: string;
  client: ClickHouseClient;
  database: string;
  log: Logger;
  ready?: () => boolean;
}

/** The HTTP port: health, the read API, and (later) the on-call pages. */
export async function startHttpServer(options: HttpServerOptions): Promise<{ port: number; close(): Promise<void> }> {
  const app = express();
  app.disable('x-powered-by');
  app.use(createReadApi(options));
  app.use((_req, res) => {
    res.status(404).json({ error: 'not found' });
  });
  const server: Server = app.listen(options.port, options.host);
  await new Promise<void>((resolve, reject) => {
    server.once('listening', resolve);
    server.once('error', reject);
  });
  return {
    port: (server.address() as AddressInfo).port,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
