// The edge's per-source connection bound: an Envoy network filter (proxy-wasm ABI 0.2.1, no libc) that
// lets one source hold at most `max_connections` open connections at once, however fast it reconnects
// (docs/edge.md). Envoy has no such count of its own.
//
// - A source is an IPv4 address (an IPv4-mapped IPv6 peer is its IPv4 address) or an IPv6 network of
//   `ipv6_prefix_bits` (CLIENT_IPV6_PREFIX_LENGTH's idea: a subscriber owns a whole /64).
// - The counts live in Envoy's shared data (one table for every worker thread's VM of this vm_id),
//   changed by compare-and-swap and retried when another worker changed the count meanwhile. A source
//   is hashed (with a per-process seed) into one of `buckets` counters, created at configuration, so
//   that the memory is fixed whatever the number of sources, and no two workers ever create a counter
//   at once (a set with no CAS token overwrites).
// - On a new connection, before Envoy reads a byte: the count is raised, or, at the bound, the
//   connection is closed at once and not counted. Each counted connection is released exactly once,
//   at the first of its close (by the client, by the filter, by Envoy's timeouts), done or delete.
// - When it cannot count (the peer's address unreadable, the CAS lost too often, its table of open
//   connections full) it lets the connection in uncounted: Envoy's global bounds still hold, and
//   the filter must never shut out everyone.
//
// Configuration (the plugin's configuration string): "max_connections=512 ipv6_prefix_bits=64
// buckets=16384". Metrics (Envoy's /stats, prefixed by Envoy): source_connection_limit.refused,
// .admitted, .uncounted (counters), .open (a gauge: counted connections still open).

typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef int i32;
typedef unsigned long long u64;
typedef long long i64;

#define IMPORT(name) __attribute__((import_module("env"), import_name(#name)))
#define EXPORT(name) __attribute__((export_name(#name)))

IMPORT(proxy_log) i32 proxy_log(i32 level, const char *message, u32 size);
IMPORT(proxy_get_property) i32 proxy_get_property(const char *path, u32 path_size, char **value, u32 *value_size);
IMPORT(proxy_get_buffer_bytes) i32 proxy_get_buffer_bytes(i32 type, u32 start, u32 max_size, char **value, u32 *size);
IMPORT(proxy_get_shared_data)
i32 proxy_get_shared_data(const char *key, u32 key_size, char **value, u32 *value_size, u32 *cas);
IMPORT(proxy_set_shared_data)
i32 proxy_set_shared_data(const char *key, u32 key_size, const char *value, u32 value_size, u32 cas);
IMPORT(proxy_define_metric) i32 proxy_define_metric(i32 type, const char *name, u32 name_size, u32 *id);
IMPORT(proxy_increment_metric) i32 proxy_increment_metric(u32 id, i64 offset);
IMPORT(proxy_close_stream) i32 proxy_close_stream(i32 stream_type);
IMPORT(proxy_get_current_time_nanoseconds) i32 proxy_get_current_time_nanoseconds(u64 *nanoseconds);

enum { RESULT_OK = 0, RESULT_NOT_FOUND = 1, RESULT_CAS_MISMATCH = 8 };
enum { LOG_INFO = 2, LOG_WARN = 3, LOG_ERROR = 4 };
enum { BUFFER_PLUGIN_CONFIGURATION = 7 };
enum { STREAM_DOWNSTREAM = 2 };
enum { METRIC_COUNTER = 0, METRIC_GAUGE = 1 };
enum { ACTION_CONTINUE = 0, ACTION_PAUSE = 1 };
// Compare-and-swap attempts before a connection is let in uncounted (each loss means another worker
// changed the same counter in between: a handful at most under any real contention).
enum { CAS_ATTEMPTS = 64 };

// --- Memory. The host copies every answer (a property, a shared value) into memory it asks for here.
// Nothing outlives the callback it was asked in, so a bump arena reset when an outermost callback
// starts is enough (callbacks nest: closing a connection from on_new_connection calls
// on_downstream_connection_close at once).

static u8 arena[64 * 1024] __attribute__((aligned(8)));
static u32 arena_used;
static u32 depth;

EXPORT(proxy_on_memory_allocate) void *proxy_on_memory_allocate(u32 size) {
  u32 at = (arena_used + 7u) & ~7u;
  if (size > sizeof arena || at > sizeof arena - size) return 0;
  arena_used = at + size;
  return arena + at;
}

static void enter(void) {
  if (depth++ == 0) arena_used = 0;
}

static void leave(void) { depth--; }

static void copy(void *to, const void *from, u32 n) {
  u8 *t = to;
  const u8 *f = from;
  while (n--) *t++ = *f++;
}

static void log_text(i32 level, const char *text) {
  u32 n = 0;
  while (text[n]) n++;
  proxy_log(level, text, n);
}

// --- Configuration.

static u32 max_connections = 512;
static u32 ipv6_prefix_bits = 64;
static u32 bucket_count = 16384; // a power of two
static u64 seed;
static u32 metric_refused, metric_admitted, metric_uncounted, metric_open;

static int word_is(const char *at, u32 n, const char *word) {
  u32 i = 0;
  for (; word[i]; i++)
    if (i >= n || at[i] != word[i]) return 0;
  return i == n;
}

// "key=value key=value": unsigned decimal values; an unknown key or a bad value fails the configuration.
static int parse_configuration(const char *text, u32 n) {
  u32 i = 0;
  while (i < n) {
    while (i < n && (text[i] == ' ' || text[i] == '\n' || text[i] == ',')) i++;
    if (i == n) break;
    u32 key = i;
    while (i < n && text[i] != '=') i++;
    if (i == n) return 0;
    u32 key_n = i - key;
    i++;
    u64 value = 0;
    u32 digits = 0;
    while (i < n && text[i] >= '0' && text[i] <= '9' && digits < 10) value = value * 10 + (u32)(text[i++] - '0'), digits++;
    if (!digits || value > 0xffffffffu || (i < n && text[i] != ' ' && text[i] != '\n' && text[i] != ',')) return 0;
    if (word_is(text + key, key_n, "max_connections") && value >= 1) max_connections = (u32)value;
    else if (word_is(text + key, key_n, "ipv6_prefix_bits") && value >= 1 && value <= 128) ipv6_prefix_bits = (u32)value;
    else if (word_is(text + key, key_n, "buckets") && value >= 1 && value <= (1u << 20) && !(value & (value - 1)))
      bucket_count = (u32)value;
    else return 0;
  }
  return 1;
}

// --- Shared counters: key "b" + 5 hex digits, value a little-endian u32.

static u32 bucket_key(u32 bucket, char key[7]) {
  static const char hex[] = "0123456789abcdef";
  key[0] = 'b';
  for (int i = 5; i >= 1; i--, bucket >>= 4) key[i] = hex[bucket & 15];
  return 6;
}

static u32 read_u32(const char *p) {
  const u8 *b = (const u8 *)p;
  return b[0] | (u32)b[1] << 8 | (u32)b[2] << 16 | (u32)b[3] << 24;
}

static void write_u32(char *p, u32 v) {
  for (int i = 0; i < 4; i++, v >>= 8) p[i] = (char)(v & 0xff);
}

// Reads a counter and its CAS token; the arena space the host used is given back at once.
static i32 get_count(const char *key, u32 key_n, u32 *count, u32 *cas) {
  u32 mark = arena_used;
  char *value = 0;
  u32 size = 0;
  *cas = 0;
  i32 r = proxy_get_shared_data(key, key_n, &value, &size, cas);
  *count = (r == RESULT_OK && value && size == 4) ? read_u32(value) : 0;
  arena_used = mark;
  return r;
}

// Adds delta (+1 or -1) unless that would pass `limit` (+1 only) or go below zero. Returns 1 when
// changed, 0 when at the limit (or already zero), -1 when it could not (CAS lost too often, no counter).
static int change_count(u32 bucket, int delta, u32 limit) {
  char key[7], value[4];
  u32 key_n = bucket_key(bucket, key);
  for (int attempt = 0; attempt < CAS_ATTEMPTS; attempt++) {
    u32 count, cas;
    i32 r = get_count(key, key_n, &count, &cas);
    if (r != RESULT_OK || !cas) return -1;
    if (delta > 0 && count >= limit) return 0;
    if (delta < 0 && count == 0) return 0;
    write_u32(value, delta > 0 ? count + 1 : count - 1);
    r = proxy_set_shared_data(key, key_n, value, 4, cas);
    if (r == RESULT_OK) return 1;
    if (r != RESULT_CAS_MISMATCH) return -1;
  }
  return -1;
}

// Every counter exists before any connection is counted: the first VM to be configured (Envoy's
// configuration canary, on the main thread, before any worker) creates them; later VMs find them.
static void create_counters(void) {
  char key[7], zero[4] = {0, 0, 0, 0};
  for (u32 b = 0; b < bucket_count; b++) {
    u32 key_n = bucket_key(b, key), count, cas;
    if (get_count(key, key_n, &count, &cas) == RESULT_NOT_FOUND) proxy_set_shared_data(key, key_n, zero, 4, 0);
  }
}

// The hash's seed, one per Envoy process (shared data lives as long as the process): an attacker
// cannot choose an address that shares a victim's counter.
static void load_seed(void) {
  static const char key[] = "seed";
  u32 mark = arena_used;
  char *value = 0;
  u32 size = 0, cas = 0;
  if (proxy_get_shared_data(key, 4, &value, &size, &cas) != RESULT_OK || size != 8) {
    u64 now = 0;
    proxy_get_current_time_nanoseconds(&now);
    char bytes[8];
    for (int i = 0; i < 8; i++) bytes[i] = (char)(now >> (8 * i));
    proxy_set_shared_data(key, 4, bytes, 8, 0);
    value = 0;
    proxy_get_shared_data(key, 4, &value, &size, &cas);
  }
  if (value && size == 8) seed = (u64)read_u32(value) | (u64)read_u32(value + 4) << 32;
  arena_used = mark;
}

// --- Who the source is.

static int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

static int parse_ipv4(const char *s, u32 n, u8 out[4]) {
  u32 i = 0;
  for (int part = 0; part < 4; part++) {
    u32 v = 0, digits = 0;
    while (i < n && s[i] >= '0' && s[i] <= '9' && digits < 3) v = v * 10 + (u32)(s[i++] - '0'), digits++;
    if (!digits || v > 255) return 0;
    out[part] = (u8)v;
    if (part < 3) {
      if (i >= n || s[i] != '.') return 0;
      i++;
    }
  }
  return i == n;
}

// RFC 4291 text (with "::" and a dotted IPv4 tail), no zone.
static int parse_ipv6(const char *s, u32 n, u8 out[16]) {
  u16 groups[8];
  int count = 0, gap = -1;
  u32 i = 0;
  if (n >= 2 && s[0] == ':' && s[1] == ':') gap = 0, i = 2;
  else if (n && s[0] == ':') return 0;
  while (i < n) {
    u32 end = i, dot = 0;
    while (end < n && s[end] != ':') dot |= s[end] == '.', end++;
    if (dot) {
      u8 v4[4];
      if (end != n || count > 6 || !parse_ipv4(s + i, n - i, v4)) return 0;
      groups[count++] = (u16)(v4[0] << 8 | v4[1]);
      groups[count++] = (u16)(v4[2] << 8 | v4[3]);
      break;
    }
    if (end == i || end - i > 4 || count == 8) return 0;
    u32 v = 0;
    for (; i < end; i++) {
      int d = hex_digit(s[i]);
      if (d < 0) return 0;
      v = v * 16 + (u32)d;
    }
    groups[count++] = (u16)v;
    if (i == n) break;
    i++; // the ':'
    if (i < n && s[i] == ':') {
      if (gap >= 0) return 0;
      gap = count;
      i++;
    } else if (i == n) return 0;
  }
  if (gap < 0 ? count != 8 : count > 7) return 0;
  int k = 0;
  for (int g = 0; g <= count; g++) {
    if (g == gap)
      for (int z = 0; z < 8 - count; z++) out[k++] = 0, out[k++] = 0;
    if (g < count) out[k++] = (u8)(groups[g] >> 8), out[k++] = (u8)groups[g];
  }
  return 1;
}

// "1.2.3.4:5678" or "[2001:db8::1]:5678" (a zone, "%eth0", is dropped) into 17 bytes: a family byte,
// then the IPv4 address or the IPv6 network (the address past ipv6_prefix_bits zeroed).
static int source_of(const char *address, u32 n, u8 key[17]) {
  for (int i = 0; i < 17; i++) key[i] = 0;
  if (n && address[0] == '[') {
    u32 close = 1;
    while (close < n && address[close] != ']') close++;
    if (close == n) return 0;
    u32 end = 1;
    while (end < close && address[end] != '%') end++;
    u8 ip[16];
    if (!parse_ipv6(address + 1, end - 1, ip)) return 0;
    int mapped = 1;
    for (int i = 0; i < 10; i++) mapped &= ip[i] == 0;
    if (mapped && ip[10] == 0xff && ip[11] == 0xff) {
      key[0] = 4;
      copy(key + 1, ip + 12, 4);
      return 1;
    }
    key[0] = 6;
    for (u32 bit = 0; bit < 128; bit += 8) {
      u32 keep = ipv6_prefix_bits > bit ? ipv6_prefix_bits - bit : 0;
      key[1 + bit / 8] = keep >= 8 ? ip[bit / 8] : (u8)(ip[bit / 8] & (0xff00 >> keep));
    }
    return 1;
  }
  u32 colon = 0;
  while (colon < n && address[colon] != ':') colon++;
  key[0] = 4;
  return parse_ipv4(address, colon, key + 1);
}

static u32 bucket_of(const u8 key[17]) {
  u64 h = 0xcbf29ce484222325ull ^ seed; // FNV-1a, then a 64-bit finaliser
  for (int i = 0; i < 17; i++) h = (h ^ key[i]) * 0x100000001b3ull;
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  return (u32)h & (bucket_count - 1);
}

static int source_bucket(u32 *bucket) {
  static const char path[] = "source\0address"; // the property path's segments, NUL-separated
  char *value = 0;
  u32 size = 0;
  u8 key[17];
  if (proxy_get_property(path, sizeof path - 1, &value, &size) != RESULT_OK || !value) return 0;
  if (!source_of(value, size, key)) return 0;
  *bucket = bucket_of(key);
  return 1;
}

// --- This VM's counted connections: context id → counter, open addressing (linear probing, deletion
// by backward shift). Sized well past any worker's share of the edge's connection bound.

#define OPEN_SLOTS 65536u
static struct {
  u32 context;
  u32 bucket;
} open_connections[OPEN_SLOTS];
static u32 open_count;

static u32 home_slot(u32 context) { return (context * 2654435761u) & (OPEN_SLOTS - 1); }

static int remember(u32 context, u32 bucket) {
  if (open_count >= OPEN_SLOTS / 4 * 3) return 0;
  u32 i = home_slot(context);
  while (open_connections[i].context) i = (i + 1) & (OPEN_SLOTS - 1);
  open_connections[i].context = context;
  open_connections[i].bucket = bucket;
  open_count++;
  return 1;
}

// The counter of a counted connection, forgotten as it is returned: a second call finds nothing.
static int forget(u32 context, u32 *bucket) {
  u32 i = home_slot(context);
  while (open_connections[i].context != context) {
    if (!open_connections[i].context) return 0;
    i = (i + 1) & (OPEN_SLOTS - 1);
  }
  *bucket = open_connections[i].bucket;
  open_count--;
  for (u32 j = i;;) {
    j = (j + 1) & (OPEN_SLOTS - 1);
    if (!open_connections[j].context) break;
    u32 home = home_slot(open_connections[j].context);
    // The entry at j stays unless its home lies cyclically outside (i, j].
    int stays = i <= j ? (home > i && home <= j) : (home > i || home <= j);
    if (!stays) {
      open_connections[i] = open_connections[j];
      i = j;
    }
  }
  open_connections[i].context = 0;
  return 1;
}

// --- The host's callbacks.

EXPORT(proxy_abi_version_0_2_1) void proxy_abi_version_0_2_1(void) {}

EXPORT(proxy_on_context_create) void proxy_on_context_create(u32 context, u32 parent) {
  (void)context;
  (void)parent;
}

EXPORT(proxy_on_vm_start) u32 proxy_on_vm_start(u32 root, u32 size) {
  (void)root;
  (void)size;
  return 1;
}

static void define_metric(i32 type, const char *name, u32 *id) {
  u32 n = 0;
  while (name[n]) n++;
  proxy_define_metric(type, name, n, id);
}

EXPORT(proxy_on_configure) u32 proxy_on_configure(u32 root, u32 size) {
  (void)root;
  enter();
  char *text = 0;
  u32 got = 0;
  int ok = size == 0 || (proxy_get_buffer_bytes(BUFFER_PLUGIN_CONFIGURATION, 0, size, &text, &got) == RESULT_OK &&
                         parse_configuration(text, got));
  if (!ok) {
    log_text(LOG_ERROR, "source_connection_limit: bad configuration (want \"max_connections=N ipv6_prefix_bits=N buckets=2^k\")");
  } else {
    define_metric(METRIC_COUNTER, "source_connection_limit.refused", &metric_refused);
    define_metric(METRIC_COUNTER, "source_connection_limit.admitted", &metric_admitted);
    define_metric(METRIC_COUNTER, "source_connection_limit.uncounted", &metric_uncounted);
    define_metric(METRIC_GAUGE, "source_connection_limit.open", &metric_open);
    load_seed();
    create_counters();
  }
  leave();
  return (u32)ok;
}

static void release(u32 context) {
  u32 bucket;
  if (!forget(context, &bucket)) return;
  proxy_increment_metric(metric_open, -1);
  if (change_count(bucket, -1, 0) < 0) log_text(LOG_WARN, "source_connection_limit: a release was lost (CAS)");
}

EXPORT(proxy_on_new_connection) u32 proxy_on_new_connection(u32 context) {
  enter();
  u32 bucket, action = ACTION_CONTINUE;
  int changed = source_bucket(&bucket) ? change_count(bucket, +1, max_connections) : -1;
  if (changed == 1 && !remember(context, bucket)) {
    change_count(bucket, -1, 0);
    changed = -1;
  }
  if (changed == 1) {
    proxy_increment_metric(metric_admitted, 1);
    proxy_increment_metric(metric_open, 1);
  } else if (changed == 0) {
    // Not counted, so the close this causes (at once, nested in this call) releases nothing.
    proxy_increment_metric(metric_refused, 1);
    proxy_close_stream(STREAM_DOWNSTREAM);
    action = ACTION_PAUSE;
  } else {
    proxy_increment_metric(metric_uncounted, 1);
  }
  leave();
  return action;
}

EXPORT(proxy_on_downstream_data) u32 proxy_on_downstream_data(u32 context, u32 size, u32 end) {
  (void)context;
  (void)size;
  (void)end;
  return ACTION_CONTINUE;
}

EXPORT(proxy_on_upstream_data) u32 proxy_on_upstream_data(u32 context, u32 size, u32 end) {
  (void)context;
  (void)size;
  (void)end;
  return ACTION_CONTINUE;
}

EXPORT(proxy_on_downstream_connection_close) void proxy_on_downstream_connection_close(u32 context, u32 peer) {
  (void)peer;
  enter();
  release(context);
  leave();
}

EXPORT(proxy_on_upstream_connection_close) void proxy_on_upstream_connection_close(u32 context, u32 peer) {
  (void)context;
  (void)peer;
}

EXPORT(proxy_on_done) u32 proxy_on_done(u32 context) {
  enter();
  release(context);
  leave();
  return 1;
}

EXPORT(proxy_on_log) void proxy_on_log(u32 context) { (void)context; }

EXPORT(proxy_on_delete) void proxy_on_delete(u32 context) {
  enter();
  release(context);
  leave();
}
