export { createViolationAlerts, type ViolationAlerts, type ViolationAlertsOptions } from './notifier.ts';
export { violationAlertsConfigSchema, type ViolationAlertsConfig } from './config.ts';
export { type Delivery, type DeliveredAlert } from './alertmanager.ts';
