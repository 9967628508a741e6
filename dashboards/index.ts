export { startHttpServer, type HttpServerOptions } from './server.ts';
export { createReadApi } from './read-api.ts';
export { createLifecycleMetrics, type LifecycleMetrics, type LifecycleMetricsOptions } from './metrics.ts';
