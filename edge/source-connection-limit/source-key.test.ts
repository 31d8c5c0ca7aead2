// Who one source is, and the count's bookkeeping, fast: the chart's binary run by Node's WebAssembly
// with a fake of the few host calls it makes (Envoy's shared data with its CAS tokens, the peer's
// address property, metrics, close). The real Envoy runs it in source-connection-limit.test.ts (IPv4
// there: loopback has one IPv6 address); here IPv6 /64s, IPv4-mapped peers and zones, which it
// cannot reach.

import { readFileSync } from 'node:fs';
import { beforeEach, describe, expect, it } from 'vitest';
import { FILTER_WASM } from './build.ts';

const RESULT = { ok: 0, notFound: 1, casMismatch: 8 } as const;

interface Filter {
  /** The host's peer address for the next new connection, then the filter's decision. */
  connect(context: number, address: string): 'admitted' | 'refused';
  close(context: number): void;
  done(context: number): void;
  metric(name: string): number;
}

function loadFilter(configuration: string): Filter {
  let memory: WebAssembly.Memory;
  let exports: Record<string, (...args: number[]) => number>;
  let address = '';
  let closed = false;
  const shared = new Map<string, { value: Uint8Array; cas: number }>();
  let nextCas = 1;
  const metricNames: string[] = [];
  const metricValues: number[] = [];
  const bytes = () => new Uint8Array(memory.buffer);
  const view = () => new DataView(memory.buffer);
  const text = (ptr: number, size: number) =>
    Buffer.from(bytes().subarray(ptr, ptr + size)).toString('latin1');
  /** Copies `data` into memory the filter allocates, and its place into *ptrPtr / *sizePtr. */
  const give = (data: Uint8Array, ptrPtr: number, sizePtr: number) => {
    const ptr = exports.proxy_on_memory_allocate?.(data.length) ?? 0;
    bytes().set(data, ptr);
    view().setUint32(ptrPtr, ptr, true);
    view().setUint32(sizePtr, data.length, true);
  };
  const env = {
    proxy_log: () => RESULT.ok,
    proxy_get_property: (pathPtr: number, pathSize: number, ptrPtr: number, sizePtr: number) => {
      if (text(pathPtr, pathSize) !== 'source\0address') return RESULT.notFound;
      give(Buffer.from(address, 'latin1'), ptrPtr, sizePtr);
      return RESULT.ok;
    },
    proxy_get_buffer_bytes: (
      _type: number,
      _start: number,
      _max: number,
      ptrPtr: number,
      sizePtr: number,
    ) => {
      give(Buffer.from(configuration), ptrPtr, sizePtr);
      return RESULT.ok;
    },
    proxy_get_shared_data: (
      keyPtr: number,
      keySize: number,
      ptrPtr: number,
      sizePtr: number,
      casPtr: number,
    ) => {
      const entry = shared.get(text(keyPtr, keySize));
      if (!entry) return RESULT.notFound;
      give(entry.value, ptrPtr, sizePtr);
      view().setUint32(casPtr, entry.cas, true);
      return RESULT.ok;
    },
    // As proxy-wasm's host: a CAS token of 0 writes unconditionally; another must match the entry's.
    proxy_set_shared_data: (
      keyPtr: number,
      keySize: number,
      valuePtr: number,
      valueSize: number,
      cas: number,
    ) => {
      const key = text(keyPtr, keySize);
      const entry = shared.get(key);
      if (entry && cas && cas !== entry.cas) return RESULT.casMismatch;
      shared.set(key, { value: bytes().slice(valuePtr, valuePtr + valueSize), cas: nextCas++ });
      return RESULT.ok;
    },
    proxy_define_metric: (_type: number, namePtr: number, nameSize: number, idPtr: number) => {
      metricNames.push(text(namePtr, nameSize));
      metricValues.push(0);
      view().setUint32(idPtr, metricNames.length - 1, true);
      return RESULT.ok;
    },
    proxy_increment_metric: (id: number, offset: bigint) => {
      metricValues[id] = (metricValues[id] ?? 0) + Number(offset);
      return RESULT.ok;
    },
    proxy_close_stream: () => {
      closed = true;
      return RESULT.ok;
    },
    proxy_get_current_time_nanoseconds: (ptr: number) => {
      view().setBigUint64(ptr, 1_764_000_000_000_000_000n, true);
      return RESULT.ok;
    },
  };
  const instance = new WebAssembly.Instance(new WebAssembly.Module(readFileSync(FILTER_WASM)), { env });
  memory = instance.exports.memory as WebAssembly.Memory;
  exports = instance.exports as unknown as typeof exports;
  const call = (name: string, ...args: number[]) => {
    const f = exports[name];
    if (!f) throw new Error(`the filter exports no ${name}`);
    return f(...args);
  };
  call('proxy_on_context_create', 1, 0);
  if (call('proxy_on_configure', 1, configuration.length) !== 1) throw new Error('configuration refused');
  return {
    connect(context, peer) {
      address = peer;
      closed = false;
      call('proxy_on_context_create', context, 1);
      const action = call('proxy_on_new_connection', context);
      expect(action === 1).toBe(closed);
      return closed ? 'refused' : 'admitted';
    },
    close: (context) => void call('proxy_on_downstream_connection_close', context, 1),
    done(context) {
      call('proxy_on_done', context);
      call('proxy_on_delete', context);
    },
    metric: (name) => metricValues[metricNames.indexOf(`source_connection_limit.${name}`)] ?? Number.NaN,
  };
}

describe('the per-source bound: who a source is, and each count released once', () => {
  let filter: Filter;
  let context = 100;
  beforeEach(() => {
    filter = loadFilter('max_connections=1 ipv6_prefix_bits=64 buckets=16384');
  });
  const connect = (address: string) => filter.connect(++context, address);

  it('counts an IPv6 client by its /64: every address of it shares one bound, another /64 has its own', () => {
    expect(connect('[2001:db8:1:2::5]:40000')).toBe('admitted');
    expect(connect('[2001:db8:1:2:ffff:ffff:ffff:fffe]:40001')).toBe('refused');
    expect(connect('[2001:0db8:0001:0002:0:0:0:9]:40002')).toBe('refused');
    expect(connect('[2001:db8:1:3::5]:40003')).toBe('admitted');
    expect(filter.metric('refused')).toBe(2);
    expect(filter.metric('uncounted')).toBe(0);
  });

  it('counts an IPv4-mapped IPv6 peer as its IPv4 address, and drops a zone', () => {
    expect(connect('198.51.100.7:5000')).toBe('admitted');
    expect(connect('[::ffff:198.51.100.7]:5001')).toBe('refused');
    expect(connect('198.51.100.8:5000')).toBe('admitted');
    expect(connect('[fe80::1%eth0]:5002')).toBe('admitted');
    expect(connect('[fe80::2%eth1]:5003')).toBe('refused');
  });

  it('with ipv6_prefix_bits=128, each IPv6 address is its own source', () => {
    filter = loadFilter('max_connections=1 ipv6_prefix_bits=128 buckets=1024');
    expect(connect('[2001:db8::1]:1')).toBe('admitted');
    expect(connect('[2001:db8::2]:1')).toBe('admitted');
    expect(connect('[2001:db8::1]:2')).toBe('refused');
  });

  it('releases a counted connection once, whichever of close, done and delete come, and a refused one never', () => {
    const first = ++context;
    expect(filter.connect(first, '203.0.113.9:1')).toBe('admitted');
    const refused = ++context;
    expect(filter.connect(refused, '203.0.113.9:2')).toBe('refused');
    filter.close(refused);
    filter.done(refused);
    // The refused connection released nothing: the source is still at its bound.
    expect(connect('203.0.113.9:3')).toBe('refused');
    filter.close(first);
    filter.done(first);
    filter.close(first);
    const second = ++context;
    expect(filter.connect(second, '203.0.113.9:4')).toBe('admitted');
    // The repeated releases of the first did not release the second's count.
    expect(connect('203.0.113.9:5')).toBe('refused');
    filter.done(second);
    expect(connect('203.0.113.9:6')).toBe('admitted');
    expect(filter.metric('admitted')).toBe(3);
    expect(filter.metric('open')).toBe(1);
  });

  it('lets in, uncounted, a peer whose address it cannot read', () => {
    expect(connect('not-an-address')).toBe('admitted');
    expect(connect('[2001:db8::1::2]:1')).toBe('admitted');
    expect(connect('300.1.1.1:1')).toBe('admitted');
    expect(filter.metric('uncounted')).toBe(3);
    expect(filter.metric('open')).toBe(0);
  });

  it('refuses a configuration it does not understand', () => {
    expect(() => loadFilter('max_connections=0')).toThrow(/configuration refused/);
    expect(() => loadFilter('buckets=1000')).toThrow(/configuration refused/);
    expect(() => loadFilter('max_conections=5')).toThrow(/configuration refused/);
  });
});
