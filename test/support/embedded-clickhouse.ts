// An embedded ClickHouse (chdb in the test's process) on a data folder of its own. Each integration test used to leave
// its folder behind: about twenty of 100-250 MB per `npm test`, which filled a developer's disk within a day.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createClickHouse, type ClickHouseClient } from '../../common/index.ts';

/** A client whose `close()` also removes its data folder, once the chdb session is closed. */
export async function embeddedClickHouse(prefix = 'holdscope-chdb-'): Promise<ClickHouseClient> {
  const dataPath = mkdtempSync(join(tmpdir(), prefix));
  const client = await createClickHouse({ dataPath });
  const close = client.close.bind(client);
  client.close = async () => {
    try {
      await close();
    } finally {
      rmSync(dataPath, { recursive: true, force: true });
    }
  };
  return client;
}
