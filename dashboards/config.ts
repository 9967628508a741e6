import { z } from 'zod';
import { key, port } from '../common/config.ts';
import { readLimitsSchema } from '../queries/index.ts';

/** The HTTP port of the pages, read API and /metrics (`holdscope serve`, and in `holdscope start`), and its reads' limits. */
export const httpServerConfigSchema = readLimitsSchema.extend({
  httpPort: key(port().default(8080), {
    help: 'HTTP port of the pages, read API and /metrics',
    env: 'HOLDSCOPE_HTTP_PORT',
    placeholder: 'port',
  }),
  /** All interfaces for `serve`, which runs as a service other hosts reach; `start` binds 127.0.0.1 unless told. */
  httpHost: key(z.string().min(1).default('0.0.0.0'), {
    help: 'listen address of the HTTP port',
    env: 'HOLDSCOPE_HTTP_HOST',
    placeholder: 'address',
  }),
  /** Off by default: the pages hold span text from every engine, so set it wherever the port is reachable by others. */
  httpToken: key(z.string().min(16, 'expected a token of at least 16 characters').optional(), {
    help: 'bearer token required on every request but /healthz, /readyz and static assets',
    env: 'HOLDSCOPE_HTTP_TOKEN',
    placeholder: 'token',
    secret: true,
  }),
});
export type HttpServerConfig = z.output<typeof httpServerConfigSchema>;
