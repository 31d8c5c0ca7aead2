#!/bin/sh
# One node of the in-chart Redis with `redis.architecture: sentinel` (templates/redis-sentinel.yaml):
#   sh redis-node.sh redis      a data node: the primary, or a replica of the primary
#   sh redis-node.sh sentinel   a sentinel watching the primary, failing over to a replica
#   sh redis-node.sh handover   the data node's preStop: a primary hands over to a replica first
# Every pod of the StatefulSet runs both. The primary is whatever the sentinels say it is (the first
# sentinel that answers); only when none answers (the first start of all) is it the first node. So a
# pod that comes back after a failover rejoins as a replica of the new primary (sentinel would turn it
# into one anyway, but only after it has served writes as a second primary for a moment).
# test/chart/redis-sentinel.test.ts runs this very file with real redis-server processes on loopback.
#
# Environment:
#   NODES          "ip:redisPort:sentinelPort …", one per node, in ordinal order: addresses that stay
#                  the same when a pod comes back (the chart: each pod's own Service's ClusterIP). IPs,
#                  not names: nothing here or in the sentinels resolves a name, so a failover does not
#                  depend on the cluster DNS (a CoreDNS pod lost with a node stalls lookups for 40 s).
#   SELF           this node's ordinal (0-based); default: the end of POD_NAME (a StatefulSet pod's)
#   MASTER_NAME    the name the sentinels monitor
#   REDIS_PASSWORD the data nodes' and the sentinels' password
#   DATA_DIR       the data node's directory (its PersistentVolume): append-only file
#   CONF_DIR       where the configuration files are written (they hold the password: not the volume)
#   QUORUM, DOWN_AFTER_MS, FAILOVER_TIMEOUT_MS   sentinel's (default 2, 5000, 60000)
#   BIND           listen address (default: every interface)
set -eu
role=${1:?usage: redis-node.sh redis|sentinel}
SELF=${SELF:-${POD_NAME##*-}}
: "${NODES:?}" "${SELF:?}" "${MASTER_NAME:?}" "${REDIS_PASSWORD:?}" "${CONF_DIR:?}"
bind=${BIND:-"* -::*"}
export REDISCLI_AUTH="$REDIS_PASSWORD"

# ip:redisPort:sentinelPort, read from the right (an IPv6 address has colons of its own).
node_ip() { rest=${1%:*}; echo "${rest%:*}"; }
node_port() { rest=${1%:*}; echo "${rest##*:}"; }
node_sentinel() { echo "${1##*:}"; }

# An IPv4 address (digits and dots) or an IPv6 one (hex digits and colons).
is_ip() {
  case $1 in
    "" | *[!0-9A-Fa-f.:]*) return 1 ;;
    *:*) return 0 ;;
    *[!0-9.]*) return 1 ;;
  esac
}

i=0
for node in $NODES; do
  host=$(node_ip "$node")
  # A handover may run in a pod of a release before 0.4.0 (DNS names in NODES): the ConfigMap holding
  # this file is updated under it during an upgrade. redis-cli resolves the names there.
  if ! is_ip "$host" && [ "$role" != handover ]; then
    # The chart's $(…_SERVICE_HOST) left unexpanded: the pod was created before its Services. A
    # restart reads them again.
    echo "redis-node: NODES must hold IP addresses, got \"$host\" in \"$NODES\"" >&2
    exit 1
  fi
  if [ "$i" -eq 0 ]; then first_host=$host; first_port=$(node_port "$node"); fi
  if [ "$i" -eq "$SELF" ]; then
    self_host=$host
    self_port=$(node_port "$node")
    self_sentinel=$(node_sentinel "$node")
  fi
  i=$((i + 1))
done
: "${self_host:?SELF is not an ordinal of NODES}"

# "ip port" of the primary as the sentinel at $1 (host) $2 (port) knows it; nothing when it does not
# answer. Releases before 0.4.0 named the nodes by DNS (<prefix>-redis-<i>.<headless Service>…): while
# one is upgraded, its sentinels answer with such a name, which this release's sentinels (resolving no
# name) and the lookups could not use; the node of that ordinal in NODES is meant.
master_addr() {
  # shellcheck disable=SC2046 # two words: host and port
  set -- $(timeout 2 redis-cli -h "$1" -p "$2" --raw sentinel get-master-addr-by-name "$MASTER_NAME" 2>/dev/null || true)
  [ $# -eq 2 ] || return 0
  if is_ip "$1"; then
    echo "$1 $2"
    return 0
  fi
  ordinal=${1%%.*}
  ordinal=${ordinal##*-}
  j=0
  for entry in $NODES; do
    if [ "$j" = "$ordinal" ]; then
      echo "$(node_ip "$entry") $(node_port "$entry")"
      return 0
    fi
    j=$((j + 1))
  done
}

# "ip port" of the primary: as a sentinel knows it, else the first node.
primary() {
  for node in $NODES; do
    answer=$(master_addr "$(node_ip "$node")" "$(node_sentinel "$node")")
    if [ -n "$answer" ]; then
      echo "$answer"
      return
    fi
  done
  echo "$first_host $first_port"
}

# A primary about to stop (a pod deleted, a node drained) hands over instead of leaving the sentinels to
# find it gone after down-after-milliseconds. It first refuses every write at once (min-replicas-to-write
# above its replica count: NOREPLICAS, the write not run; reads go on), not holding them: a held write
# outlives the clients' command timeout (500 ms) while the sentinels take ~1.3 s, and a held connection
# their socket timeout, and then no client can tell whether it ran. Once a replica has every write
# (its offset the primary's), a sentinel is asked to fail over to it, and once the sentinels name the new
# primary this node becomes its replica (writes then answer READONLY and the clients reconnect through
# the sentinels). The quota services run a script refused either way again (not run) until it runs on
# the new primary (services/quota/stores/redis-connection.ts). A replica stops as it is.
if [ "$role" = handover ]; then
  [ "$(timeout 2 redis-cli -p "$self_port" --raw role 2>/dev/null | head -n 1)" = master ] || exit 0
  # A former primary the sentinels have not yet turned into a replica still says master: only the one
  # they name hands over (another failover would be a window of its own).
  [ "$(primary)" = "$self_host $self_port" ] || exit 0
  wait_ms=${HANDOVER_WAIT_MS:-10000}
  config() { redis-cli -p "$self_port" --raw config get "$1" | tail -n 1; }
  min_replicas=$(config min-replicas-to-write)
  max_lag=$(config min-replicas-max-lag)
  redis-cli -p "$self_port" config set min-replicas-max-lag 10 >/dev/null
  redis-cli -p "$self_port" config set min-replicas-to-write 1000000 >/dev/null
  # A replica with every write: its offset the primary's (at most 1 s: the sentinels pick the most
  # up-to-date replica anyway, and none at all fails the failover below).
  tries=20
  while [ "$tries" -gt 0 ]; do
    info=$(redis-cli -p "$self_port" --raw info replication | tr -d '\r')
    offset=$(echo "$info" | sed -n 's/^master_repl_offset://p')
    echo "$info" | grep -q "^slave[0-9]*:.*,offset=$offset," && break
    tries=$((tries - 1))
    sleep 0.05
  done
  for node in $NODES; do
    [ "$node" != "$self_host:$self_port:$self_sentinel" ] || continue
    sentinel_host=$(node_ip "$node")
    sentinel_port=$(node_sentinel "$node")
    [ "$(timeout 2 redis-cli -h "$sentinel_host" -p "$sentinel_port" --raw sentinel failover "$MASTER_NAME" 2>/dev/null)" = OK ] || continue
    tries=$((wait_ms / 100))
    while [ "$tries" -gt 0 ]; do
      # shellcheck disable=SC2046 # two words: host and port
      set -- $(master_addr "$sentinel_host" "$sentinel_port")
      if [ $# -eq 2 ] && [ "$1:$2" != "$self_host:$self_port" ]; then
        redis-cli -p "$self_port" replicaof "$1" "$2" >/dev/null
        echo "redis-node: handed over to $1:$2"
        break
      fi
      tries=$((tries - 1))
      sleep 0.1
    done
    break
  done
  # As configured again (a replica ignores it; this node may be promoted one day).
  redis-cli -p "$self_port" config set min-replicas-to-write "$min_replicas" >/dev/null 2>&1 || true
  redis-cli -p "$self_port" config set min-replicas-max-lag "$max_lag" >/dev/null 2>&1 || true
  exit 0
fi

mkdir -p "$CONF_DIR"
# shellcheck disable=SC2046 # two words: host and port
set -- $(primary)
primary_host=$1
primary_port=$2

if [ "$role" = redis ]; then
  : "${DATA_DIR:?}"
  conf="$CONF_DIR/redis.conf"
  cat >"$conf" <<EOF
bind $bind
port $self_port
dir $DATA_DIR
appendonly yes
appendfsync everysec
requirepass "$REDIS_PASSWORD"
masterauth "$REDIS_PASSWORD"
replica-announce-ip $self_host
replica-announce-port $self_port
EOF
  if [ "$primary_host" != "$self_host" ] || [ "$primary_port" != "$self_port" ]; then
    echo "replicaof $primary_host $primary_port" >>"$conf"
    echo "redis-node: replica of $primary_host:$primary_port"
  else
    echo "redis-node: primary"
  fi
  exec redis-server "$conf"
fi

if [ "$role" = sentinel ]; then
  # The primary's pod may not be up yet (the first start of all): sentinel wants it answering.
  tries=0
  until timeout 2 redis-cli -h "$primary_host" -p "$primary_port" ping >/dev/null 2>&1; do
    tries=$((tries + 1))
    if [ "$tries" -ge 60 ]; then break; fi
    sleep 1
  done
  # Sentinel rewrites its file as it learns (replicas, other sentinels, the current primary).
  conf="$CONF_DIR/sentinel.conf"
  cat >"$conf" <<EOF
bind $bind
port $self_sentinel
dir $CONF_DIR
sentinel resolve-hostnames no
sentinel announce-hostnames no
sentinel announce-ip $self_host
sentinel announce-port $self_sentinel
requirepass "$REDIS_PASSWORD"
sentinel sentinel-pass "$REDIS_PASSWORD"
sentinel monitor $MASTER_NAME $primary_host $primary_port ${QUORUM:-2}
sentinel auth-pass $MASTER_NAME "$REDIS_PASSWORD"
sentinel down-after-milliseconds $MASTER_NAME ${DOWN_AFTER_MS:-5000}
sentinel failover-timeout $MASTER_NAME ${FAILOVER_TIMEOUT_MS:-60000}
sentinel parallel-syncs $MASTER_NAME 1
EOF
  echo "redis-node: sentinel watching $primary_host:$primary_port"
  exec redis-server "$conf" --sentinel
fi

echo "redis-node: unknown role $role (redis or sentinel)" >&2
exit 2
