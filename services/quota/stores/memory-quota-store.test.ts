import { describe } from 'vitest';
import { MemoryQuotaStore } from './memory-quota-store.ts';
import { quotaStoreContract } from './quota-store.contract.ts';

describe('MemoryQuotaStore', () => {
  quotaStoreContract({
    open: async (now) => new MemoryQuotaStore(now),
    chargeIdFor: (requestId) => requestId,
  });
});
