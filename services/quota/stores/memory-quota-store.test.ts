import { describe } from 'vitest';
import { ComposedKeyQuota } from '../authorize.ts';
import { keyQuotaContract } from './key-quota.contract.ts';
import { MemoryQuotaStore } from './memory-quota-store.ts';
import { quotaStoreContract } from './quota-store.contract.ts';
import { sharedBudgetContract } from './shared-budget.contract.ts';
import { memoryAccountStore } from './sqlite-account-store.ts';

describe('MemoryQuotaStore', () => {
  quotaStoreContract({
    open: async (now) => new MemoryQuotaStore(now),
    chargeIdFor: (requestId) => requestId,
  });
});

describe('ComposedKeyQuota over the memory stores', () => {
  keyQuotaContract({
    open: async (now) => {
      const accounts = memoryAccountStore();
      return { keys: new ComposedKeyQuota(accounts, new MemoryQuotaStore(now), now), accounts };
    },
  });
});

describe('MemoryQuotaStore: shared budgets', () => {
  sharedBudgetContract(async (now) => new MemoryQuotaStore(now));
});
