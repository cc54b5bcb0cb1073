#!/usr/bin/env bash
# What metrics, logs and the token check cost on the hot path: two release
# `floe serve` on the same machine, alternating under the same load each round:
#   observed: metrics on, logs at the default level (info), bearer tokens required;
#   plain:    metrics off ([metrics] enabled = false), RUST_LOG=off, no tokens.
# Both get the same `authorization` header. Loads: gRPC GetNextId WEAK with h2load (c16 m8 and
# c4 m1), HTTP WEAK with wrk (/v1/sequencer/default/k and Leaf's /api/segment/get/k).
# Prints each measurement's median req/s per server and the ratio observed / plain.
#
#   scripts/overhead.sh                 # 5 rounds of 4 s per target
#   ROUNDS=3 SECONDS_PER_RUN=3 scripts/overhead.sh
#   H2_CONNS=4x1 HTTP_PATHS=" " ROUNDS=10 scripts/overhead.sh   # one measurement, more rounds
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/services.sh

ROUNDS=${ROUNDS:-5}
SECONDS_PER_RUN=${SECONDS_PER_RUN:-4}
OUT=${OUT:-target/load/overhead.tsv}

ensure_package nghttp2-client /usr/bin/h2load
ensure_package wrk /usr/bin/wrk
ensure_package curl /usr/bin/curl
ensure_package xxd /usr/bin/xxd

if [ -z "${FLOE_BIN:-}" ]; then
  echo "==> building floe (release)" >&2
  cargo build --release --locked -q -p floe-cli --bin floe
fi
FLOE_BIN=${FLOE_BIN:-target/release/floe}

work=$(mktemp -d)
mkdir -p "$(dirname "$OUT")"
: >"$OUT"
source scripts/lib/load.sh

TOKEN=$(head -c 24 /dev/urandom | xxd -p)
printf '# overhead.sh\n%s\n' "$TOKEN" >"$work/tokens"
printf '[metrics]\nenabled = false\n' >"$work/plain.toml"

# floe NAME ENV... -- ARGS...: a release `floe serve` on a memory store; sets ADDR_GRPC, ADDR_HTTP.
floe() {
  local name=$1
  shift
  local envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  start "$name" env "${envs[@]}" "$FLOE_BIN" serve --state-dir "$work/$name" \
    --store default=memory --grpc 127.0.0.1:0 --http 127.0.0.1:0 "$@"
  ADDR_GRPC=$(started_addr grpc)
  ADDR_HTTP=$(started_addr http)
}

# OBSERVED=metrics or tokens: the observed server with that part only (to find what costs).
case "${OBSERVED:-all}" in
  all) floe observed -- --token-file "$work/tokens" ;;
  metrics) floe observed -- ;;
  tokens) floe observed -- --token-file "$work/tokens" --config "$work/plain.toml" ;;
  *) echo "OBSERVED: all, metrics or tokens" >&2; exit 2 ;;
esac
observed_grpc=$ADDR_GRPC observed_http=$ADDR_HTTP
floe plain RUST_LOG=off -- --config "$work/plain.toml"
plain_grpc=$ADDR_GRPC plain_http=$ADDR_HTTP
echo "observed: grpc=$observed_grpc http=$observed_http; plain: grpc=$plain_grpc http=$plain_http" >&2

auth="authorization: Bearer $TOKEN"
# The token is checked: without it the observed server refuses.
if [ "${OBSERVED:-all}" != metrics ]; then
  code=$(curl -s -o /dev/null -w '%{http_code}' "http://$observed_http/v1/sequencer/default/k")
  [ "$code" = 401 ] || { echo "observed server answered $code without a token" >&2; exit 1; }
fi

frame "$work/get_next_id.bin" "0a07$(hexs default)1201$(hexs k)"
get_next_id=/spec.proto.runtime.v1.Runtime/GetNextId

record() { printf '%s\t%s\t%s\t%s\n' "$@" >>"$OUT"; }

h2() { # h2 NAME SERVER ROUND CxM URL
  local c=${4%x*} m=${4#*x} text rps
  text=$(h2load -c"$c" -m"$m" -t1 -D "$SECONDS_PER_RUN" -d "$work/get_next_id.bin" \
    -H 'content-type: application/grpc' -H 'te: trailers' -H "$auth" "$5")
  grep -q ' 0 failed, 0 errored' <<<"$text" || { echo "h2load $2: failures:" >&2; echo "$text" >&2; exit 1; }
  rps=$(sed -n 's/^finished in [^,]*, \([0-9.]*\) req\/s.*/\1/p' <<<"$text")
  record "$1" "$2" "$3" "$rps"
}

http() { # http NAME SERVER ROUND URL
  local text rps
  text=$(wrk -t2 -c16 -d"${SECONDS_PER_RUN}s" -H "$auth" "$4")
  if grep -q 'Non-2xx' <<<"$text"; then echo "wrk $2: non-2xx answers:" >&2; echo "$text" >&2; exit 1; fi
  rps=$(awk '/^Requests\/sec:/ { print $2 }' <<<"$text")
  record "$1" "$2" "$3" "$rps"
}

pair() { if (($1 % 2)); then eval "$2"; eval "$3"; else eval "$3"; eval "$2"; fi; }

for round in $(seq 1 "$ROUNDS"); do
  echo "round $round/$ROUNDS" >&2
  for cm in ${H2_CONNS:-16x8 4x1}; do
    pair "$round" \
      "h2 'grpc GetNextId WEAK c${cm/x/ m}' observed $round $cm http://$observed_grpc$get_next_id" \
      "h2 'grpc GetNextId WEAK c${cm/x/ m}' plain $round $cm http://$plain_grpc$get_next_id"
  done
  for route in ${HTTP_PATHS:-/v1/sequencer/default/k /api/segment/get/k}; do
    pair "$round" \
      "http 'http $route' observed $round http://$observed_http$route" \
      "http 'http $route' plain $round http://$plain_http$route"
  done
done

python3 - "$OUT" <<'EOF'
import sys, statistics, collections
rows = collections.defaultdict(lambda: collections.defaultdict(list))
order = []
for line in open(sys.argv[1]):
    name, server, _round, rps = line.rstrip("\n").split("\t")
    if name not in order:
        order.append(name)
    rows[name][server].append(float(rps))
print("| measurement | observed req/s | plain req/s | observed / plain |")
print("|---|---|---|---|")
for name in order:
    o = statistics.median(rows[name]["observed"])
    p = statistics.median(rows[name]["plain"])
    print(f"| {name} | {o:,.0f} | {p:,.0f} | {o / p:.3f} |")
EOF
