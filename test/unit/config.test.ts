import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Command } from 'commander';
import { z } from 'zod';
import { addConfigOptions } from '../../cli/options.ts';
import { simulateSchema } from '../../cli/simulate.ts';
import { startConfigSchema } from '../../cli/start.ts';
import { collectorConfigSchema } from '../../collector/index.ts';
import { ConfigError, key, loadConfig } from '../../common/index.ts';
import { httpServerConfigSchema } from '../../dashboards/index.ts';
import { pipelineConfigSchema, storageConfigSchema } from '../../pipeline/index.ts';

const schemas = {
  collector: collectorConfigSchema,
  pipeline: pipelineConfigSchema,
  serve: storageConfigSchema.extend(httpServerConfigSchema.shape),
  start: startConfigSchema,
  simulate: simulateSchema,
};

describe('configuration declared once', () => {
  it('gives every key of every command help, and --help shows its variable and default', () => {
    for (const [name, schema] of Object.entries(schemas)) {
      const command = addConfigOptions(new Command(name), schema);
      assert.equal(command.options.length, Object.keys(schema.shape).length, name);
    }
    const help = addConfigOptions(new Command('collector'), collectorConfigSchema).helpInformation().replace(/\s+/g, ' ');
    assert.match(help, /--port <port> OTLP\/HTTP port \(HOLDSCOPE_OTLP_PORT; default 4318\)/);
    assert.match(help, /--auth-token <token> [^(]+\(HOLDSCOPE_COLLECTOR_TOKEN\)/);
  });

  it('refuses a key declared without help', () => {
    assert.throws(() => addConfigOptions(new Command('x'), z.object({ bare: z.string().default('x') })), /bare has no help/);
  });

  it('takes flags over environment over defaults', () => {
    const schema = z.object({ size: key(z.coerce.number().default(5), { help: 'size', env: 'TEST_SIZE' }) });
    assert.equal(loadConfig(schema, {}, {}).size, 5);
    assert.equal(loadConfig(schema, {}, { TEST_SIZE: '7' }).size, 7);
    assert.equal(loadConfig(schema, { size: '9' }, { TEST_SIZE: '7' }).size, 9);
    assert.equal(loadConfig(schema, {}, { TEST_SIZE: '' }).size, 5, 'an empty variable is unset');
  });

  it('names the flag, its variable, the expectation and the value given, but never a secret', () => {
    assert.throws(
      () => loadConfig(collectorConfigSchema, { port: '70000' }, { HOLDSCOPE_COLLECTOR_TOKEN: 'short-secret' }),
      (error: Error) =>
        error instanceof ConfigError &&
        /--port \(HOLDSCOPE_OTLP_PORT\): expected a port number 0-65535, got "70000"/.test(error.message) &&
        /--auth-token \(HOLDSCOPE_COLLECTOR_TOKEN\): expected a token of at least 16 characters, got a value not shown/.test(
          error.message,
        ) &&
        !error.message.includes('short-secret'),
    );
  });

  it('has start read the collector and HTTP tokens from the same variables as their own commands', () => {
    const env = { HOLDSCOPE_COLLECTOR_TOKEN: 'collector-token-0123456789', HOLDSCOPE_HTTP_TOKEN: 'http-token-0123456789' };
    const start = loadConfig(startConfigSchema, {}, env);
    assert.equal(start.otlpHost, '127.0.0.1');
    assert.equal(
      loadConfig(collectorConfigSchema, { port: start.otlpPort, host: start.otlpHost }, env).authToken,
      env.HOLDSCOPE_COLLECTOR_TOKEN,
    );
    assert.equal(loadConfig(httpServerConfigSchema, { httpPort: start.httpPort }, env).httpToken, env.HOLDSCOPE_HTTP_TOKEN);
    assert.equal(loadConfig(simulateSchema, {}, env).token, env.HOLDSCOPE_COLLECTOR_TOKEN, 'simulated engines send it');
  });
});
