export { startHttpServer, type HttpServerOptions } from './server.ts';
export { MAX_LOOKUP_REQUEST_IDS } from './read-api.ts';
export { createLifecycleMetrics, type LifecycleMetrics, type LifecycleMetricsOptions } from './metrics.ts';
export { externalUrl, httpServerConfigSchema, type HttpServerConfig } from './config.ts';
export { renderAlertRules, rulesConfigSchema, type RulesConfig, type RulesParameters } from './alerts/rules.ts';
export {
  createViolationAlerts,
  violationAlertsConfigSchema,
  type Delivery,
  type ViolationAlerts,
  type ViolationAlertsConfig,
} from './violation-alerts/index.ts';
