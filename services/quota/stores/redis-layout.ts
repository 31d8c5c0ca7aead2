// Where every record lives in Redis: one layout for all three topologies (hash tags cost nothing on a
// single Redis). In a Cluster each script's keys are in one hash slot, given by the `{…}` tag:
//
//   P{acct:<id>}acct            hash    the account: id, email, tier, passwordHash, createdAt
//   P{acct:<id>}keys            zset    its key ids by creation time (ms)
//   P{acct:<id>}key:<keyId>     hash    a key: ApiKeyRecord fields + hash (SHA-256 of the secret); '' = null
//   P{acct:<id>}m, …d           hash    its quota windows {w: window start ms, n: count}
//   P{acct:<id>}h, …h:key:<id>  hash    usage history of the account and of each key: s:<day>, r:<day>
//   P{anon:ip:<ip>}m, …d, …h    hash    an anonymous subject's windows (and history, when kept)
//   P{<slot tag>}c:<requestId>  hash    a charge (which windows a request counted), in the slot of those
//                                       windows; the slot tag travels in the charge id (`chargeId`)
//   P{email:<email>}            string  accountId: the email index (one slot per email)
//   P{kh:<sha256>}              string  "<accountId> <keyId>": the key-hash index (one slot per key)
//   P{kid:<keyId>}              string  accountId: finds a key by id alone (admin, touch)
//   P sess:<sha256(token)>      string  JSON Session, expiring with it
//   P dev:<deviceId>            hash    requests today from a device id
//
// An account, its keys and its counters share a slot: the key path's second step (key not revoked →
// account → tier → count) is one atomic script there, and so is a key's creation with the account's
// active-keys limit (count the unrevoked keys, then create); subjects spread over the shards. The three
// indexes have one entry per email or key, each in a slot of its own (hashed from the email or the
// key), so they spread over a Cluster's shards as the accounts do; no key gathers every account. Each
// write to an entry is atomic within its slot, and a change that spans slots (create, revoke, delete)
// is ordered so that a half-done one is harmless and repaired by the next write
// (see redis-account-store.ts).

import { accountSubject } from '../authorize.ts';

/** The subject (or history subject `acct:<id>/key:<keyId>`) whose slot a record lives in. */
export function slotSubject(subject: string): string {
  const slash = subject.indexOf('/');
  return slash < 0 ? subject : subject.slice(0, slash);
}

export class RedisLayout {
  readonly prefix: string;

  constructor(prefix: string) {
    this.prefix = prefix;
  }

  #in(tag: string, name: string): string {
    return `${this.prefix}{${tag}}${name}`;
  }

  account(accountId: string): string {
    return this.#in(accountSubject(accountId), 'acct');
  }

  accountKeys(accountId: string): string {
    return this.#in(accountSubject(accountId), 'keys');
  }

  key(accountId: string, keyId: string): string {
    return this.#in(accountSubject(accountId), `key:${keyId}`);
  }

  minute(subject: string): string {
    return this.#in(subject, 'm');
  }

  day(subject: string): string {
    return this.#in(subject, 'd');
  }

  /** The history hash of `acct:<id>`, `acct:<id>/key:<keyId>` or any other subject. */
  history(subject: string): string {
    const tag = slotSubject(subject);
    const rest = subject.slice(tag.length + 1);
    return this.#in(tag, rest === '' ? 'h' : `h:${rest}`);
  }

  /** A charge record, in the slot named by the tag the charge id carries. */
  charge(slotTag: string, requestId: string): string {
    return this.#in(slotTag, `c:${requestId}`);
  }

  email(email: string): string {
    return this.#in(`email:${email}`, '');
  }

  /** SCAN pattern of every account record (the prefix's glob characters escaped). */
  accountPattern(): string {
    return `${this.prefix.replace(/[*?[\]\\]/g, '\\$&')}{acct:*}acct`;
  }

  keyHash(hash: string): string {
    return this.#in(`kh:${hash}`, '');
  }

  keyAccount(keyId: string): string {
    return this.#in(`kid:${keyId}`, '');
  }

  session(tokenHash: string): string {
    return `${this.prefix}sess:${tokenHash}`;
  }

  device(deviceId: string): string {
    return `${this.prefix}dev:${deviceId}`;
  }
}

// A charge id is `<requestId>.<slot tag>`: the tag is a short string that hashes to the slot of the
// windows the request counted, so a refund arriving at any replica finds the record beside them.

const SLOTS = 16384;

/** The charge id handed out for a request counted in `subject`'s windows. */
export function chargeIdFor(requestId: string, subject: string): string {
  return `${requestId}-${slotTagOf(keySlot(`{${slotSubject(subject)}}`))}`;
}

/** The request id and the slot tag of a charge id; a bare request id (no tag) → undefined. */
export function parseChargeId(chargeId: string): { requestId: string; slotTag: string } | undefined {
  const m = /^(.+)-(t[0-9a-z]+)$/.exec(chargeId);
  return m ? { requestId: m[1] as string, slotTag: m[2] as string } : undefined;
}

/** The charge record of a charge id (see chargeIdFor). A bare request id is the one-round-trip key
 * path's on a single keyspace (it cannot know the account's slot in advance): a fixed tag. */
export function chargeKeyOf(layout: RedisLayout, chargeId: string): string {
  const parsed = parseChargeId(chargeId);
  return parsed ? layout.charge(parsed.slotTag, parsed.requestId) : layout.charge('c', chargeId);
}

let slotTags: string[] | undefined;

/** Builds the slot → tag table (some ms): a store calls it when it is made, not on a request. */
export function prepareSlotTags(): void {
  if (slotTags) return;
  const tags: string[] = new Array(SLOTS);
  let missing = SLOTS;
  for (let n = 0; missing > 0; n++) {
    const tag = `t${n.toString(36)}`;
    const s = crc16(tag) % SLOTS;
    if (tags[s] === undefined) {
      tags[s] = tag;
      missing--;
    }
  }
  slotTags = tags;
}

/** A short tag (`t` + base 36) whose key slot is `slot`, the same one on every process. */
function slotTagOf(slot: number): string {
  prepareSlotTags();
  return (slotTags as string[])[slot] as string;
}

/** Redis Cluster's key slot: CRC16 of the key, or of its first non-empty `{…}` tag, mod 16384. */
export function keySlot(key: string): number {
  const open = key.indexOf('{');
  if (open >= 0) {
    const close = key.indexOf('}', open + 1);
    if (close > open + 1) return crc16(key.slice(open + 1, close)) % SLOTS;
  }
  return crc16(key) % SLOTS;
}

const CRC16_TABLE = (() => {
  const table = new Uint16Array(256);
  for (let i = 0; i < 256; i++) {
    let crc = i << 8;
    for (let bit = 0; bit < 8; bit++)
      crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff;
    table[i] = crc;
  }
  return table;
})();

/** CRC16-CCITT (XMODEM), as Redis Cluster uses it, over the UTF-8 bytes. */
function crc16(text: string): number {
  let crc = 0;
  for (let i = 0; i < text.length; i++) {
    const code = text.charCodeAt(i);
    if (code > 0x7f) return crc16Bytes(Buffer.from(text, 'utf8'));
    crc = ((crc << 8) & 0xffff) ^ (CRC16_TABLE[((crc >> 8) ^ code) & 0xff] as number);
  }
  return crc;
}

function crc16Bytes(bytes: Uint8Array): number {
  let crc = 0;
  for (const byte of bytes) crc = ((crc << 8) & 0xffff) ^ (CRC16_TABLE[((crc >> 8) ^ byte) & 0xff] as number);
  return crc;
}
