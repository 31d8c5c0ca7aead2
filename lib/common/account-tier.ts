// Account tiers: a capability type shared by configuration (per-tier limits), the quota service and
// the console. It lives here so that common code never imports from a service.

export const ACCOUNT_TIERS = ['free', 'pro'] as const;
export type AccountTier = (typeof ACCOUNT_TIERS)[number];

export function isAccountTier(value: unknown): value is AccountTier {
  return typeof value === 'string' && (ACCOUNT_TIERS as readonly string[]).includes(value);
}
