export { startHttpServer, type HttpServerOptions } from './server.ts';
export { createReadApi } from './read-api.ts';
