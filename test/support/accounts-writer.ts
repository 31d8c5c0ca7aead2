// A child process that opens the accounts store exactly as the server does at boot (openStores with
// ACCOUNTS_FILE), reports what it found beside the file, then writes through the store as fast as it
// can — accounts, keys, sessions, tier changes, revocations — until it is killed, printing one line
// for every write the store acknowledged (a pipe write is synchronous on Linux: a printed line was
// acknowledged before the kill). The crash-safety test kills it with SIGKILL mid-write, checks every
// acknowledged write survived, and starts it again.
//   node --import tsx test/support/accounts-writer.ts   (ACCOUNTS_FILE in the environment)

import { readdirSync } from 'node:fs';
import { dirname } from 'node:path';
import { loadQuotaConfig } from '../../services/quota/config.ts';
import { openStores } from '../../services/quota/stores/open-stores.ts';

/** One acknowledged write, as the writer prints it (`ack <json>`). */
export type AckedWrite =
  | { account: string; email: string }
  | { key: string; secret: string }
  | { session: string; account: string }
  | { pro: string }
  | { revoked: string; secret: string }
  // Not an acknowledgement: said before a revocation starts, so that a kill between its commit and its
  // `revoked` line leaves the key either way (both are correct: the revocation was never acknowledged).
  | { revoking: string; secret: string };

const ack = (write: AckedWrite) => process.stdout.write(`ack ${JSON.stringify(write)}\n`);

const config = loadQuotaConfig(process.env);
const stores = await openStores(config);
const accounts = stores.accountStore;
// One line, then the writes: the parent reads what a restart left beside the file once it is open.
process.stdout.write(
  `${JSON.stringify({ ready: true, accounts: (await accounts.listAccounts()).length, files: readdirSync(dirname(config.accountsFile)).sort() })}\n`,
);
for (let i = 0; ; i++) {
  const email = `writer-${process.pid}-${i}@example.com`;
  const account = await accounts.createAccount({
    email,
    tier: 'free',
    passwordHash: `scrypt$not-a-real-hash-${i}`,
  });
  ack({ account: account.id, email });
  const key = await accounts.createKey(account.id, { name: `k${i}` });
  if (key) ack({ key: key.record.id, secret: key.secret });
  const session = await stores.sessionStore.createSession(account.id, 600_000);
  ack({ session: session.token, account: account.id });
  await accounts.setTier(account.id, 'pro');
  ack({ pro: account.id });
  if (key) await accounts.touchKey(key.record.id);
  if (key && i % 3 === 0) {
    ack({ revoking: key.record.id, secret: key.secret });
    await accounts.revokeKey(key.record.id);
    ack({ revoked: key.record.id, secret: key.secret });
  }
  if (i === 0) process.stdout.write('writing\n');
}
