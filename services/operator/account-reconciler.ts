// ApiAccount → an account in the quota store (Redis) with one key per spec.keys entry; each key's secret
// goes once into the Secret `<name>-keys` (owned by the ApiAccount), only its hash into the store. Keys
// no longer listed are revoked (the very next request with them is 401/4011: resolveKey reads the store
// on every call). Deletion removes the account and every key of it from the store, then releases the
// finalizer.
// Level-triggered: the store and the Secret are compared on every pass; an active key whose secret is
// not in the Secret (a crash between issuing and writing) is revoked and issued again.

import type { V1Secret } from '@kubernetes/client-node';
import { type AccountTier, isAccountTier } from '../../lib/common/account-tier.ts';
import type { AccountStore, ApiKeyRecord } from '../quota/accounts/account-store.ts';
import { displayParts } from '../quota/accounts/api-keys.ts';
import {
  apply,
  applyFinalizers,
  applyStatus,
  type CustomResource,
  conditions,
  event,
  type Kube,
  ownerReference,
  statusCode,
} from './kube.ts';

export const ACCOUNT_KIND = 'ApiAccount';
export const ACCOUNT_PLURAL = 'apiaccounts';
export const ACCOUNT_FINALIZER = 'nsfwdetector.io/revoke-keys';

export function keysSecretName(accountName: string): string {
  return `${accountName}-keys`;
}

async function readSecret(kube: Kube, namespace: string, name: string): Promise<Record<string, string>> {
  try {
    const secret: V1Secret = await kube.core.readNamespacedSecret({ name, namespace });
    const out: Record<string, string> = {};
    for (const [k, v] of Object.entries(secret.data ?? {}))
      out[k] = Buffer.from(v, 'base64').toString('utf8');
    return out;
  } catch (err) {
    if (statusCode(err) === 404) return {};
    throw err;
  }
}

function matches(record: ApiKeyRecord, secret: string | undefined): boolean {
  if (!secret) return false;
  const parts = displayParts(secret);
  return parts.prefix === record.prefix && parts.last4 === record.last4;
}

export async function reconcileAccount(kube: Kube, store: AccountStore, cr: CustomResource): Promise<string> {
  const namespace = cr.metadata.namespace;
  const email = String(cr.spec.email ?? '');
  const finalizers = cr.metadata.finalizers ?? [];
  if (cr.metadata.deletionTimestamp) {
    if (!finalizers.includes(ACCOUNT_FINALIZER)) return 'gone';
    // One step in the store: the keys stop resolving and the account record goes with them. A pass
    // that finds no account (deleted by an earlier pass that failed later) just releases the finalizer.
    const account = await store.findAccountByEmail(email);
    let revoked = 0;
    if (account) {
      revoked = (await store.listKeys(account.id)).filter((k) => !k.revokedAt).length;
      await store.deleteAccount(account.id);
    }
    await event(
      kube,
      cr,
      ACCOUNT_KIND,
      'Normal',
      'Revoked',
      account
        ? `Account ${account.id} of ${email} removed with its keys (${revoked} active); finalizer released`
        : `No account for ${email} left in the store; finalizer released`,
    );
    await applyFinalizers(kube, ACCOUNT_PLURAL, ACCOUNT_KIND, cr, []);
    return 'finalized';
  }
  if (!finalizers.includes(ACCOUNT_FINALIZER)) {
    await applyFinalizers(kube, ACCOUNT_PLURAL, ACCOUNT_KIND, cr, [ACCOUNT_FINALIZER]);
  }
  const tier: AccountTier = isAccountTier(cr.spec.tier) ? cr.spec.tier : 'free';
  let account = await store.findAccountByEmail(email);
  if (!account) {
    try {
      account = await store.createAccount({ email, tier });
    } catch (err) {
      const message = `The account cannot be created: ${(err as Error).message}`;
      await event(kube, cr, ACCOUNT_KIND, 'Warning', 'Refused', message);
      await applyStatus(kube, ACCOUNT_PLURAL, cr, ACCOUNT_KIND, {
        observedGeneration: cr.metadata.generation ?? 0,
        conditions: conditions(
          cr.status?.conditions,
          [
            { type: 'Ready', status: 'False', reason: 'Refused', message },
            { type: 'Degraded', status: 'True', reason: 'Refused', message },
          ],
          cr.metadata.generation ?? 0,
        ),
      });
      return 'refused';
    }
    await event(
      kube,
      cr,
      ACCOUNT_KIND,
      'Normal',
      'Created',
      `Account ${account.id} created for ${account.email}`,
    );
  }
  if (account.tier !== tier) {
    await store.setTier(account.id, tier);
    await event(kube, cr, ACCOUNT_KIND, 'Normal', 'TierChanged', `Tier ${account.tier} → ${tier}`);
  }
  const wanted = ((cr.spec.keys ?? []) as Array<{ name: string }>).map((k) => k.name);
  const secretName = keysSecretName(cr.metadata.name);
  const secrets = await readSecret(kube, namespace, secretName);
  const active = (await store.listKeys(account.id)).filter((k) => !k.revokedAt);
  const kept = new Map<string, ApiKeyRecord>();
  for (const key of active) {
    if (wanted.includes(key.name) && !kept.has(key.name) && matches(key, secrets[key.name])) {
      kept.set(key.name, key);
      continue;
    }
    // Not listed any more, a duplicate, or its secret was never written: revoke.
    await store.revokeKey(key.id, account.id);
    await event(kube, cr, ACCOUNT_KIND, 'Normal', 'KeyRevoked', `Key ${key.name} (${key.id}) revoked`);
  }
  const data: Record<string, string> = {};
  for (const name of wanted) {
    const existing = kept.get(name);
    if (existing) {
      data[name] = secrets[name] as string;
      continue;
    }
    const created = await store.createKey(account.id, { name });
    if (!created) throw new Error(`account ${account.id} vanished while issuing key ${name}`);
    kept.set(name, created.record);
    data[name] = created.secret;
    await event(
      kube,
      cr,
      ACCOUNT_KIND,
      'Normal',
      'KeyIssued',
      `Key ${name} (${created.record.id}) issued into Secret ${secretName}`,
    );
  }
  await apply(kube, {
    apiVersion: 'v1',
    kind: 'Secret',
    type: 'Opaque',
    metadata: {
      name: secretName,
      namespace,
      labels: {
        'app.kubernetes.io/managed-by': 'nsfwdetector-operator',
        'nsfwdetector.io/account': cr.metadata.name,
      },
      ownerReferences: [ownerReference(cr, ACCOUNT_KIND)],
    },
    // `data`, not `stringData`: server-side apply tracks ownership of data.<name>, so an entry this
    // manager stops applying (a removed key) is removed from the Secret.
    data: Object.fromEntries(Object.entries(data).map(([k, v]) => [k, Buffer.from(v).toString('base64')])),
  });
  const generation = cr.metadata.generation ?? 0;
  const keys = wanted.map((name) => {
    const k = kept.get(name) as ApiKeyRecord;
    return { name, id: k.id, prefix: k.prefix, last4: k.last4, createdAt: k.createdAt };
  });
  const message = `Account ${account.id} (${tier}) has ${keys.length} active key(s) in Secret ${secretName}`;
  await applyStatus(kube, ACCOUNT_PLURAL, cr, ACCOUNT_KIND, {
    observedGeneration: generation,
    accountId: account.id,
    secret: secretName,
    keyCount: keys.length,
    keys,
    conditions: conditions(
      cr.status?.conditions,
      [
        { type: 'Ready', status: 'True', reason: 'Reconciled', message },
        { type: 'Degraded', status: 'False', reason: 'Reconciled', message },
      ],
      generation,
    ),
  });
  return 'reconciled';
}
