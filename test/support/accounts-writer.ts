// A child process that opens the accounts store exactly as the server does at boot (openStores with
// ACCOUNTS_FILE), reports what it found beside the file, then writes through the store as fast as it
// can — accounts, keys, sessions, tier changes — until it is killed. The crash-safety test kills it
// with SIGKILL mid-write and starts it again.
//   node --import tsx test/support/accounts-writer.ts   (ACCOUNTS_FILE in the environment)

import { readdirSync } from 'node:fs';
import { dirname } from 'node:path';
import { loadQuotaConfig } from '../../services/quota/config.ts';
import { openStores } from '../../services/quota/stores/open-stores.ts';

const config = loadQuotaConfig(process.env);
const stores = await openStores(config);
const accounts = stores.accountStore;
// One line, then the writes: the parent reads what a restart left beside the file once it is open.
process.stdout.write(
  `${JSON.stringify({ ready: true, accounts: (await accounts.listAccounts()).length, files: readdirSync(dirname(config.accountsFile)).sort() })}\n`,
);
for (let i = 0; ; i++) {
  const account = await accounts.createAccount({
    email: `writer-${process.pid}-${i}@example.com`,
    tier: 'free',
    passwordHash: `scrypt$not-a-real-hash-${i}`,
  });
  const key = await accounts.createKey(account.id, { name: `k${i}` });
  await stores.sessionStore.createSession(account.id, 60_000);
  await accounts.setTier(account.id, 'pro');
  if (key) await accounts.touchKey(key.record.id);
  if (i === 0) process.stdout.write('writing\n');
}
