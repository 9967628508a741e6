import { z } from 'zod';
import { key, port } from '../common/config.ts';
import { readLimitsSchema } from '../queries/index.ts';

/**
 * Where people reach the pages: alerts and rules link to the incident and the runbook under it, and a link must work
 * from the pager, so it is absolute. The default suits `npm start` on the machine itself; set it wherever the page is
 * reached through another name, a proxy or another port.
 */
export const externalUrl = () =>
  key(
    z
      .url({ protocol: /^https?$/, error: 'expected an absolute http(s) URL' })
      .default('http://localhost:8080')
      .transform((url) => url.replace(/\/+$/, '')),
    {
      help: 'URL at which people reach the pages: the base of the links in alerts and rules',
      env: 'HOLDSCOPE_EXTERNAL_URL',
      placeholder: 'url',
    },
  );

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
  externalUrl: externalUrl(),
});
export type HttpServerConfig = z.output<typeof httpServerConfigSchema>;
