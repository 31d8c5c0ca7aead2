// An Envoy listener for trying the filter on this machine (its test, its cost measurement): Envoy
// answers every request 200 itself, behind the per-source bound (the chart's binary, configured as
// the chart configures it) — or without it, for a baseline.

import { FILTER_WASM } from './build.ts';

/** The filter as files/envoy.yaml.tpl renders it, with a bound of `bound`. */
export function sourceConnectionLimitFilter(bound: number) {
  return {
    name: 'envoy.filters.network.wasm',
    typed_config: {
      '@type': 'type.googleapis.com/envoy.extensions.filters.network.wasm.v3.Wasm',
      config: {
        name: 'source_connection_limit',
        root_id: 'source_connection_limit',
        failure_policy: 'FAIL_OPEN',
        configuration: {
          '@type': 'type.googleapis.com/google.protobuf.StringValue',
          value: `max_connections=${bound} ipv6_prefix_bits=64 buckets=16384`,
        },
        vm_config: {
          vm_id: 'source_connection_limit',
          runtime: 'envoy.wasm.runtime.v8',
          code: { local: { filename: FILTER_WASM } },
        },
      },
    },
  };
}

/** A listener on a free loopback port; `idle` closes idle connections; no filter when `bound` is undefined. */
export function listener(name: string, opts: { idle: string; bound?: number }) {
  return {
    name,
    address: { socket_address: { address: '127.0.0.1', port_value: 0 } },
    filter_chains: [
      {
        filters: [
          ...(opts.bound === undefined ? [] : [sourceConnectionLimitFilter(opts.bound)]),
          {
            name: 'envoy.filters.network.http_connection_manager',
            typed_config: {
              '@type':
                'type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager',
              stat_prefix: name,
              common_http_protocol_options: { idle_timeout: opts.idle },
              route_config: {
                virtual_hosts: [
                  {
                    name: 'all',
                    domains: ['*'],
                    routes: [
                      {
                        match: { prefix: '/' },
                        direct_response: { status: 200, body: { inline_string: 'ok' } },
                      },
                    ],
                  },
                ],
              },
              http_filters: [
                {
                  name: 'envoy.filters.http.router',
                  typed_config: {
                    '@type': 'type.googleapis.com/envoy.extensions.filters.http.router.v3.Router',
                  },
                },
              ],
            },
          },
        ],
      },
    ],
  };
}
