import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { loadConfig } from '../../common/index.ts';
import { pipelineConfigSchema } from '../../pipeline/index.ts';

describe('pipeline configuration', () => {
  it('names each flag below its minimum with the minimum and the value given', () => {
    assert.throws(
      () =>
        loadConfig(
          pipelineConfigSchema,
          { kafkaBrokers: 'k:9092', maxInFlightBytes: '10', maxBatchRows: '0', maxBytesPerPartition: '-1' },
          {},
        ),
      (error: Error) => {
        assert.match(error.message, /--max-in-flight-bytes.*expected an integer >= 1024, got "10"/);
        assert.match(error.message, /--max-batch-rows.*expected an integer >= 1, got "0"/);
        assert.match(error.message, /--max-bytes-per-partition.*expected an integer >= 1024, got "-1"/);
        return true;
      },
    );
  });

  it('takes the documented defaults', () => {
    const config = loadConfig(pipelineConfigSchema, { kafkaBrokers: 'k:9092' }, {});
    assert.equal(config.maxInFlightBytes, 24 * 2 ** 20);
    assert.equal(config.maxBatchRows, 50_000);
  });
});
