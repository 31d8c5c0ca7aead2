// Who a client is, for every per-address limit (the anonymous quota, the detect gate's per-address
// bounds, the console's sign-up and login limits): an IPv4 address is one client; an IPv6 address is
// its network of CLIENT_IPV6_PREFIX_LENGTH bits (a /64 by default: one subscriber's allocation, whose
// 2^64 addresses it can rotate through freely); an IPv4-mapped IPv6 address (::ffff:a.b.c.d, how a
// dual-stack socket shows an IPv4 peer) is that IPv4 address.

import { isIPv4, isIPv6 } from 'node:net';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { SETTINGS } from './settings.ts';

declare module 'fastify' {
  interface FastifyRequest {
    /** The client for per-address limits: request.ip, an IPv6 address as its network (clientKey). */
    readonly clientKey: string;
  }
}

const DEFAULT_IPV6_PREFIX_LENGTH = SETTINGS.CLIENT_IPV6_PREFIX_LENGTH.default;

/** Gives every request of `app` its `clientKey` (each service's root app does: root-app.ts). */
export function decorateClientKey(
  app: FastifyInstance,
  ipv6PrefixLength: number = DEFAULT_IPV6_PREFIX_LENGTH,
): void {
  app.decorateRequest('clientKey', {
    getter(this: FastifyRequest) {
      return clientKey(this.ip, ipv6PrefixLength);
    },
  });
}

/**
 * The client identity of a peer address (the socket's, or the one the trusted edge appended to
 * X-Forwarded-For): IPv4 as is; IPv4-mapped IPv6 as its IPv4 address; other IPv6 as
 * `<network>/<prefixLength>` in RFC 5952 form (the address itself at 128). Anything that is not an
 * IP address is returned unchanged.
 */
export function clientKey(address: string, ipv6PrefixLength: number = DEFAULT_IPV6_PREFIX_LENGTH): string {
  if (isIPv4(address)) return address;
  const plain = address.replace(/%.*$/, ''); // a link-local address's zone names an interface, not a client
  if (!isIPv6(plain)) return address;
  const words = ipv6Words(plain);
  const [high = 0, low = 0] = words.slice(6);
  if (words.slice(0, 5).every((w) => w === 0) && words[5] === 0xffff) {
    return [high >> 8, high & 0xff, low >> 8, low & 0xff].join('.');
  }
  if (ipv6PrefixLength >= 128) return formatIpv6(words);
  const masked = words.map((word, i) => {
    const bits = Math.min(16, Math.max(0, ipv6PrefixLength - 16 * i));
    return bits === 0 ? 0 : word & ((0xffff << (16 - bits)) & 0xffff);
  });
  return `${formatIpv6(masked)}/${ipv6PrefixLength}`;
}

/** How wide a network is, for the shares of a site-wide total (shared-budget.ts). */
export interface NetworkPrefixes {
  ipv4: number;
  ipv6: number;
}

/**
 * The network a peer address belongs to, for shares of a site-wide total: `<network>/<bits>` — IPv4
 * (and IPv4-mapped IPv6) by its first `prefixes.ipv4` bits (a /24: one site), other IPv6 by its first
 * `prefixes.ipv6` (a /48: what one subscriber or site is given; a /56 home is inside it). Anything that
 * is not an IP address is returned unchanged.
 */
export function networkKey(address: string, prefixes: NetworkPrefixes): string {
  const key = clientKey(address, prefixes.ipv6);
  if (!isIPv4(key)) return key;
  const bits = prefixes.ipv4;
  const value = key.split('.').reduce((n, octet) => n * 256 + Number(octet), 0);
  const masked = bits === 0 ? 0 : value - (value % 2 ** (32 - bits));
  const octets = [24, 16, 8, 0].map((shift) => Math.floor(masked / 2 ** shift) % 256);
  return `${octets.join('.')}/${bits}`;
}

/** The eight 16-bit words of a valid IPv6 address (a trailing dotted IPv4 part included). */
function ipv6Words(address: string): number[] {
  let text = address.toLowerCase();
  const dotted = /(\d+)\.(\d+)\.(\d+)\.(\d+)$/.exec(text);
  if (dotted) {
    const [a, b, c, d] = dotted.slice(1).map(Number) as [number, number, number, number];
    text = `${text.slice(0, dotted.index)}${((a << 8) | b).toString(16)}:${((c << 8) | d).toString(16)}`;
  }
  const [head = '', tail] = text.split('::');
  const part = (s: string) => (s === '' ? [] : s.split(':').map((h) => Number.parseInt(h, 16)));
  const first = part(head);
  if (tail === undefined) return first;
  const last = part(tail);
  return [...first, ...new Array<number>(8 - first.length - last.length).fill(0), ...last];
}

/** RFC 5952: lower-case hex, no leading zeros, the longest run (two or more) of zero words as `::`. */
function formatIpv6(words: number[]): string {
  let best = { start: -1, length: 0 };
  for (let i = 0; i < 8; ) {
    if (words[i] !== 0) {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && words[j] === 0) j++;
    if (j - i > best.length) best = { start: i, length: j - i };
    i = j;
  }
  const hex = (ws: number[]) => ws.map((w) => w.toString(16)).join(':');
  if (best.length < 2) return hex(words);
  return `${hex(words.slice(0, best.start))}::${hex(words.slice(best.start + best.length))}`;
}
