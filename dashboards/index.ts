export { startHttpServer, type HttpServerOptions } from './server.ts';
export { MAX_LOOKUP_REQUEST_IDS } from './read-api.ts';
export { createLifecycleMetrics, type LifecycleMetrics, type LifecycleMetricsOptions } from './metrics.ts';
export { httpServerConfigSchema, type HttpServerConfig } from './config.ts';
