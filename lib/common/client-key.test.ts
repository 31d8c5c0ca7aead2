// The client identity of a peer address, with hand-written expectations. The same function on real
// IPv6 sockets, end to end: test/e2e/ipv6-clients.test.ts.

import { describe, expect, it } from 'vitest';
import { clientKey, networkKey } from './client-key.ts';

describe('clientKey', () => {
  it('keeps an IPv4 address as it is: one address, one client', () => {
    expect(clientKey('203.0.113.7')).toBe('203.0.113.7');
    expect(clientKey('127.0.0.1', 48)).toBe('127.0.0.1');
  });

  it('counts an IPv4-mapped IPv6 address as its IPv4 address, in either spelling', () => {
    expect(clientKey('::ffff:203.0.113.7')).toBe('203.0.113.7');
    expect(clientKey('::FFFF:203.0.113.7')).toBe('203.0.113.7');
    expect(clientKey('::ffff:cb00:7107')).toBe('203.0.113.7');
    expect(clientKey('0:0:0:0:0:ffff:7f00:1')).toBe('127.0.0.1');
  });

  it('groups IPv6 addresses by their /64 by default', () => {
    expect(clientKey('2001:db8:1:2:3:4:5:6')).toBe('2001:db8:1:2::/64');
    expect(clientKey('2001:db8:1:2:ffff:ffff:ffff:ffff')).toBe('2001:db8:1:2::/64');
    expect(clientKey('2001:DB8:1:2::1')).toBe('2001:db8:1:2::/64');
    expect(clientKey('2001:db8:1:3::1')).toBe('2001:db8:1:3::/64');
    expect(clientKey('2001:0db8:0000:0000:0000:0000:0000:0001')).toBe('2001:db8::/64');
    expect(clientKey('::1')).toBe('::/64');
    expect(clientKey('fe80::1%eth0')).toBe('fe80::/64');
  });

  it('takes any prefix length, also inside a 16-bit word', () => {
    expect(clientKey('2001:db8:abcd:12ff::1', 56)).toBe('2001:db8:abcd:1200::/56');
    expect(clientKey('2001:db8:abcd:12ff::1', 48)).toBe('2001:db8:abcd::/48');
    expect(clientKey('2001:db8:abcd:12ff::1', 33)).toBe('2001:db8:8000::/33');
    expect(clientKey('2001:db8:7bcd:12ff::1', 33)).toBe('2001:db8::/33');
    expect(clientKey('2001:db9:abcd:12ff::1', 32)).toBe('2001:db9::/32');
    expect(clientKey('2001:db8:1:2:3:4:5:6', 127)).toBe('2001:db8:1:2:3:4:5:6/127');
    expect(clientKey('2001:db8:1:2:3:4:5:7', 127)).toBe('2001:db8:1:2:3:4:5:6/127');
    expect(clientKey('2001:db8:1:2:3:4:5:7', 128)).toBe('2001:db8:1:2:3:4:5:7');
    expect(clientKey('2001:db8:0:0:1::7', 128)).toBe('2001:db8::1:0:0:7');
  });

  it('writes the network in RFC 5952 form: the first longest run of zeros as ::, a lone zero kept', () => {
    expect(clientKey('2001:0:0:1:0:0:0:1', 128)).toBe('2001:0:0:1::1');
    expect(clientKey('2001:db8:0:1:1:1:1:1', 128)).toBe('2001:db8:0:1:1:1:1:1');
    expect(clientKey('1:0:0:2:0:0:3:4', 128)).toBe('1::2:0:0:3:4');
  });

  it('leaves anything that is not an IP address unchanged', () => {
    expect(clientKey('unknown')).toBe('unknown');
    expect(clientKey('')).toBe('');
    expect(clientKey('2001:db8::g')).toBe('2001:db8::g');
  });
});

describe('networkKey (shares of a site-wide total)', () => {
  const prefixes = { ipv4: 24, ipv6: 48 };

  it('puts IPv4 (and IPv4-mapped IPv6) in its /24, IPv6 in its /48', () => {
    expect(networkKey('203.0.113.7', prefixes)).toBe('203.0.113.0/24');
    expect(networkKey('203.0.113.250', prefixes)).toBe('203.0.113.0/24');
    expect(networkKey('::ffff:203.0.113.9', prefixes)).toBe('203.0.113.0/24');
    expect(networkKey('203.0.114.7', prefixes)).toBe('203.0.114.0/24');
    // The 50 /64s of one home /56 are one network; the next /48 is another.
    expect(networkKey('2001:db8:ab:cd00::1', prefixes)).toBe('2001:db8:ab::/48');
    expect(networkKey('2001:db8:ab:cd31::99', prefixes)).toBe('2001:db8:ab::/48');
    expect(networkKey('2001:db8:ac::1', prefixes)).toBe('2001:db8:ac::/48');
  });

  it('takes any prefix length', () => {
    expect(networkKey('203.0.113.7', { ipv4: 32, ipv6: 48 })).toBe('203.0.113.7/32');
    expect(networkKey('203.0.113.200', { ipv4: 25, ipv6: 48 })).toBe('203.0.113.128/25');
    expect(networkKey('255.255.255.255', { ipv4: 8, ipv6: 48 })).toBe('255.0.0.0/8');
    expect(networkKey('2001:db8:ab:cd31::99', { ipv4: 24, ipv6: 56 })).toBe('2001:db8:ab:cd00::/56');
  });

  it('leaves anything that is not an IP address unchanged', () => {
    expect(networkKey('unknown', prefixes)).toBe('unknown');
  });
});
