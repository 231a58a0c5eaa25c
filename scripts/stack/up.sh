#!/usr/bin/env bash
# make stack: the whole Tollgate pipeline on this machine, without Docker.
#
# Installs nats-server and clickhouse-server from the OS packages when
# missing (needs root for apt-get), starts them on loopback ports with their
# data under ./.stack/, builds the services, writes .stack/tollgate.yaml and
# starts gateway (against the NATS server, not -embed), budget and analytics
# (which applies the ClickHouse migrations at start). Every process started
# is recorded in .stack/pids; `make stack-down` stops exactly those.
# Ports: env STACK_GATEWAY_PORT (18080), STACK_NATS_PORT (14222),
# STACK_NATS_MON_PORT (18222), STACK_CH_TCP_PORT (19000), STACK_CH_HTTP_PORT
# (18123), STACK_MOCK_PORT (19999).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
S="$ROOT/.stack"
GW_PORT=${STACK_GATEWAY_PORT:-18080}
NATS_PORT=${STACK_NATS_PORT:-14222}
NATS_MON=${STACK_NATS_MON_PORT:-18222}
CH_TCP=${STACK_CH_TCP_PORT:-19000}
CH_HTTP=${STACK_CH_HTTP_PORT:-18123}
MOCK_PORT=${STACK_MOCK_PORT:-19999}
WAIT=${STACK_WAIT_SECONDS:-30}

if [ -s "$S/pids" ]; then
  echo "stack: .stack/pids exists; run make stack-down first" >&2
  exit 1
fi
mkdir -p "$S"/{bin,logs,nats,clickhouse/data,clickhouse/tmp,clickhouse/user_files,clickhouse/format_schemas,clickhouse/log,spool}

# wait_for NAME CMD...: run CMD until it succeeds, at most $WAIT seconds.
wait_for() {
  local name=$1; shift
  local deadline=$((SECONDS + WAIT))
  until "$@" >/dev/null 2>&1; do
    if [ $SECONDS -ge $deadline ]; then
      echo "stack: $name not ready after ${WAIT}s; see .stack/logs" >&2
      exit 1
    fi
    sleep 0.2
  done
}

# start NAME CMD...: start CMD in the background, logging to .stack/logs/NAME.log.
start() {
  local name=$1; shift
  "$@" >"$S/logs/$name.log" 2>&1 &
  echo "$! $name" >>"$S/pids"
}

# 1. OS packages.
need=()
command -v nats-server >/dev/null 2>&1 || need+=(nats-server)
CH_BIN=$(command -v clickhouse-server || true)
[ -z "$CH_BIN" ] && [ -x /usr/sbin/clickhouse-server ] && CH_BIN=/usr/sbin/clickhouse-server
[ -z "$CH_BIN" ] && [ -x /usr/bin/clickhouse-server ] && CH_BIN=/usr/bin/clickhouse-server
[ -z "$CH_BIN" ] && need+=(clickhouse-server)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "stack: installing ${need[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
    CH_BIN=$(command -v clickhouse-server || echo /usr/sbin/clickhouse-server)
  else
    echo "stack: missing ${need[*]}; install them with your package manager" >&2
    exit 1
  fi
fi

# 2. Build.
echo "stack: building services"
# Go's experimental SIMD package for the request-body scan, as the Makefile
# sets it (GOEXPERIMENT= for the portable build).
export GOEXPERIMENT="${GOEXPERIMENT-simd}"
go build -o "$S/bin/" ./services/gateway ./services/budget ./services/analytics ./services/mockllm ./services/tollctl

# 3. NATS with JetStream.
start nats nats-server -a 127.0.0.1 -p "$NATS_PORT" -m "$NATS_MON" -js -sd "$S/nats"
wait_for nats curl -sf "http://127.0.0.1:$NATS_MON/healthz?js-enabled-only=true"

# 4. ClickHouse, own config, data under .stack/clickhouse.
C="$S/clickhouse"
cat >"$C/config.xml" <<XML
<?xml version="1.0"?>
<yandex>
  <logger><level>warning</level><log>$C/log/server.log</log><errorlog>$C/log/error.log</errorlog><size>10M</size><count>1</count></logger>
  <listen_host>127.0.0.1</listen_host>
  <tcp_port>$CH_TCP</tcp_port>
  <http_port>$CH_HTTP</http_port>
  <path>$C/data/</path>
  <tmp_path>$C/tmp/</tmp_path>
  <user_files_path>$C/user_files/</user_files_path>
  <format_schema_path>$C/format_schemas/</format_schema_path>
  <users_config>users.xml</users_config>
  <default_profile>default</default_profile>
  <default_database>default</default_database>
  <mark_cache_size>268435456</mark_cache_size>
  <max_concurrent_queries>100</max_concurrent_queries>
  <mlock_executable>false</mlock_executable>
</yandex>
XML
cat >"$C/users.xml" <<'XML'
<?xml version="1.0"?>
<yandex>
  <profiles><default></default></profiles>
  <users><default><password></password><networks><ip>127.0.0.1</ip><ip>::1</ip></networks><profile>default</profile><quota>default</quota></default></users>
  <quotas><default></default></quotas>
</yandex>
XML
start clickhouse "$CH_BIN" --config-file="$C/config.xml"
wait_for clickhouse curl -sf "http://127.0.0.1:$CH_HTTP/ping"

# 5. Config: the development config on the stack's ports, with NATS.
sed -e "s/^listen: .*/listen: 127.0.0.1:$GW_PORT/" deploy/dev/tollgate.yaml >"$S/tollgate.yaml"
cat >>"$S/tollgate.yaml" <<YAML

# Added by scripts/stack/up.sh.
nats:
  url: nats://127.0.0.1:$NATS_PORT
usage:
  spool_dir: $S/spool
budgets:
  - {scope: dept, value: "*", amount_usd: "100", period: month}
YAML
export TOLLGATE_CONFIG="$S/tollgate.yaml"

# 6. Services.
start mockllm env MOCKLLM_LISTEN="127.0.0.1:$MOCK_PORT" "$S/bin/mockllm"
start analytics "$S/bin/analytics" -config "$S/tollgate.yaml" -clickhouse "127.0.0.1:$CH_TCP" -database tollgate
start budget "$S/bin/budget" -config "$S/tollgate.yaml"
start gateway "$S/bin/gateway" -config "$S/tollgate.yaml"
wait_for gateway curl -sf "http://127.0.0.1:$GW_PORT/readyz"
wait_for migrations sh -c "curl -sf 'http://127.0.0.1:$CH_HTTP/' --data-binary 'EXISTS TABLE tollgate.usage_events' | grep -q 1"

TOKEN=$("$S/bin/tollctl" token --config "$S/tollgate.yaml" --sub dev --dept eng --team platform --project demo)
cat <<MSG

Tollgate stack is up (processes in .stack/pids, logs in .stack/logs).

  Gateway:    http://127.0.0.1:$GW_PORT/v1
  Dev token:  $TOKEN
  Try:        curl -s http://127.0.0.1:$GW_PORT/v1/chat/completions -H "Authorization: Bearer \$TOKEN" \\
                -H 'Content-Type: application/json' -d '{"model":"mock-gpt","messages":[{"role":"user","content":"hi"}]}'
  NATS:       nats://127.0.0.1:$NATS_PORT (monitoring http://127.0.0.1:$NATS_MON)
  Replay:     .stack/bin/tollctl replay --nats nats://127.0.0.1:$NATS_PORT --clickhouse 127.0.0.1:$CH_TCP --to ndjson

Grafana ClickHouse data source (plugin grafana-clickhouse-datasource):
  Server address: 127.0.0.1   Server port: $CH_TCP   Protocol: Native   Secure: off
  Username: default           Password: (empty)      Default database: tollgate
  (or set TOLLGATE_CH_HOST=127.0.0.1 TOLLGATE_CH_PORT=$CH_TCP TOLLGATE_CH_USER=default
   TOLLGATE_CH_DATABASE=tollgate and use deploy/grafana/provisioning), then import dashboards/*.json.

Stop with: make stack-down
MSG
