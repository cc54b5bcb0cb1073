#!/usr/bin/env bash
# Load of `floe serve` on loopback, each measurement beside its baseline in the
# same run with the same client, and a table of medians, p99 and ratios.
#
#   scripts/load.sh            # 5 rounds of 4 s per target (under 5 minutes, the build aside)
#   QUICK=1 scripts/load.sh    # 2 rounds of 2 s per target (about a minute)
#   ROUNDS=7 SECONDS_PER_RUN=10 scripts/load.sh
#
# Targets: the release `floe` binary (`floe serve --store default=memory`, every other setting
# at its default) and `noop-grpc` (crates/floe-bench/src/bin/noop-grpc.rs: Layotto's
# Runtime/GetNextId answering a constant through the same generated service and codec, served by
# plain tonic `Server::builder()` on the same tokio runtime as floe serve). Clients: h2load
# (Debian's nghttp2-client) for gRPC, wrk for HTTP; both installed here when missing. The
# clients run on the same cores as the servers: on a 2-core machine that is the measured case.
#
# Each round runs every target of a comparison back to back, the order alternating between
# rounds, so that both see the same machine state. Raw numbers go to $OUT (default
# target/load/results.tsv), the table to standard output (and $OUT.md).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/services.sh

if [ "${QUICK:-0}" = 1 ]; then
  ROUNDS=${ROUNDS:-2}
  SECONDS_PER_RUN=${SECONDS_PER_RUN:-2}
else
  ROUNDS=${ROUNDS:-5}
  SECONDS_PER_RUN=${SECONDS_PER_RUN:-4}
fi
# The batch measurements are fewer rounds: they are not a ratio to a baseline.
BATCH_ROUNDS=${BATCH_ROUNDS:-$(((ROUNDS + 1) / 2))}
OUT=${OUT:-target/load/results.tsv}
H2_CONNS=${H2_CONNS:-"16x8 4x1"}  # gRPC concurrency: CONNECTIONSxSTREAMS, each measured
WRK_THREADS=${WRK_THREADS:-2}
WRK_CONNS=${WRK_CONNS:-16}

ensure_package nghttp2-client /usr/bin/h2load
ensure_package wrk /usr/bin/wrk
ensure_package curl /usr/bin/curl
ensure_package xxd /usr/bin/xxd

# FLOE_BIN / NOOP_BIN: binaries to measure instead of the ones built here (an older build, say).
if [ -z "${FLOE_BIN:-}" ] || [ -z "${NOOP_BIN:-}" ]; then
  echo "==> building floe and noop-grpc (release)" >&2
  cargo build --release --locked -q -p floe-cli --bin floe -p floe-bench --bin noop-grpc
fi
FLOE_BIN=${FLOE_BIN:-target/release/floe}
NOOP_BIN=${NOOP_BIN:-target/release/noop-grpc}

work=$(mktemp -d)
mkdir -p "$(dirname "$OUT")"
: >"$OUT"
source scripts/lib/load.sh

start floe "$FLOE_BIN" serve --state-dir "$work/state" --store default=memory \
  --grpc 127.0.0.1:0 --http 127.0.0.1:0
floe_grpc=$(started_addr grpc)
floe_http=$(started_addr http)
start noop "$NOOP_BIN" 127.0.0.1:0
noop_pid=${pids[1]}
floe_pid=${pids[0]}
noop_grpc=$(started_addr grpc)
echo "floe: grpc=$floe_grpc http=$floe_http; noop: grpc=$noop_grpc" >&2

# GetNextIdRequest{store_name: "default", key: "k"} (WEAK: options absent)
frame "$work/get_next_id.bin" "0a07$(hexs default)1201$(hexs k)"
# NextSequenceRequest{store: "default", key: "k", count: 1000}
frame "$work/next_sequence.bin" "0a07$(hexs default)1201$(hexs k)20e807"
# NextIdsRequest{kind: KIND_SNOWFLAKE, count: 1000}
frame "$work/next_ids.bin" "080110e807"

# grpc_check ADDR PATH BODY: one request through curl, failing unless grpc-status is 0.
grpc_check() {
  local trailers
  trailers=$(curl -sS --http2-prior-knowledge -o /dev/null -D - -H 'content-type: application/grpc' \
    -H 'te: trailers' --data-binary @"$3" "http://$1$2")
  grep -qi '^grpc-status: *0' <<<"$trailers" || {
    echo "gRPC $1$2 did not answer OK:" >&2
    echo "$trailers" >&2
    exit 1
  }
}
grpc_check "$floe_grpc" /spec.proto.runtime.v1.Runtime/GetNextId "$work/get_next_id.bin"
grpc_check "$noop_grpc" /spec.proto.runtime.v1.Runtime/GetNextId "$work/get_next_id.bin"
grpc_check "$floe_grpc" /floe.v1.Floe/NextSequence "$work/next_sequence.bin"
grpc_check "$floe_grpc" /floe.v1.Floe/NextIds "$work/next_ids.bin"
for path in /healthz /v1/sequencer/default/k /api/segment/get/k /api/snowflake/get/k \
  '/v1/sequencer/default/k?count=1000' '/v1/ids/snowflake?count=1000'; do
  curl -fsS -o /dev/null "http://$floe_http$path" || {
    echo "HTTP $path failed" >&2
    exit 1
  }
done

# record MEASUREMENT TARGET ROUND REQ_PER_S P99_MS FAILED CPU_US_PER_REQUEST
record() { printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$@" >>"$OUT"; }

# The server's CPU time so far (user and system, in clock ticks), and per request of a run: the
# column that other load on a shared machine disturbs least.
ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
per_request() { # per_request TICKS REQUESTS: microseconds
  awk -v t="$1" -v n="$2" -v hz="$(getconf CLK_TCK)" 'BEGIN { printf "%.2f", (n > 0 ? t * 1e6 / hz / n : 0) }'
}

# h2 MEASUREMENT TARGET ROUND CONNSxSTREAMS URL BODY
h2() {
  local c=${4%x*} m=${4#*x} log="$work/h2load.log" text rps failed p99 pid t0 done_
  pid=$floe_pid
  [ "$2" = noop ] && pid=$noop_pid
  t0=$(ticks "$pid")
  text=$(h2load -c"$c" -m"$m" -t1 -D "$SECONDS_PER_RUN" -d "$6" \
    -H 'content-type: application/grpc' -H 'te: trailers' --log-file="$log" "$5")
  cpu=$(($(ticks "$pid") - t0))
  done_=$(sed -n 's/^requests: .* \([0-9]*\) succeeded.*/\1/p' <<<"$text")
  rps=$(sed -n 's/^finished in [^,]*, \([0-9.]*\) req\/s.*/\1/p' <<<"$text")
  failed=$(sed -n 's/^requests: .* \([0-9]*\) failed, \([0-9]*\) errored.*/\1+\2/p' <<<"$text")
  # The log: start (µs), status, duration (µs) per request.
  p99=$(cut -f3 "$log" | sort -n | awk '{ v[NR] = $1 } END { i = int(NR * 0.99); if (i < 1) i = 1; printf "%.3f", v[i] / 1000 }')
  record "$1" "$2" "$3" "$rps" "$p99" "$((failed))" "$(per_request "$cpu" "$done_")"
}

# to_ms VALUE-WITH-UNIT: wrk's latency (us, ms, s) in milliseconds.
to_ms() { awk -v v="$1" 'BEGIN { n = v + 0; if (v ~ /us$/) n /= 1000; else if (v ~ /ms$/) ; else if (v ~ /s$/) n *= 1000; printf "%.3f", n }'; }

# http MEASUREMENT TARGET ROUND URL
http() {
  local text rps p99 non2xx t0 cpu total
  t0=$(ticks "$floe_pid")
  text=$(wrk -t"$WRK_THREADS" -c"$WRK_CONNS" -d"${SECONDS_PER_RUN}s" --latency "$4")
  cpu=$(($(ticks "$floe_pid") - t0))
  total=$(awk '/requests in/ { print $1 }' <<<"$text")
  rps=$(awk '/^Requests\/sec:/ { print $2 }' <<<"$text")
  p99=$(to_ms "$(awk '$1 == "99%" { print $2 }' <<<"$text")")
  non2xx=$(awk '/Non-2xx/ { print $NF }' <<<"$text")
  record "$1" "$2" "$3" "$rps" "$p99" "${non2xx:-0}" "$(per_request "$cpu" "$total")"
}

# pair ROUND FIRST-COMMAND SECOND-COMMAND: both, in an order that alternates with the round.
pair() {
  if (($1 % 2)); then eval "$2"; eval "$3"; else eval "$3"; eval "$2"; fi
}

get_next_id=/spec.proto.runtime.v1.Runtime/GetNextId
echo "==> $ROUNDS rounds of ${SECONDS_PER_RUN} s per target" >&2
for round in $(seq 1 "$ROUNDS"); do
  echo "round $round/$ROUNDS" >&2
  for cm in $H2_CONNS; do
    pair "$round" \
      "h2 'grpc GetNextId WEAK c${cm/x/ m}' floe $round $cm http://$floe_grpc$get_next_id $work/get_next_id.bin" \
      "h2 'grpc GetNextId WEAK c${cm/x/ m}' noop $round $cm http://$noop_grpc$get_next_id $work/get_next_id.bin"
  done
  # HTTP: each route, with /healthz of the same server once per round, in a rotating order.
  routes=(healthz /healthz sequencer /v1/sequencer/default/k leaf-segment /api/segment/get/k
    leaf-snowflake /api/snowflake/get/k)
  n=$((${#routes[@]} / 2))
  for i in $(seq 0 $((n - 1))); do
    j=$(((i + round) % n))
    http "http" "${routes[2 * j]}" "$round" "http://$floe_http${routes[2 * j + 1]}"
  done
done
for round in $(seq 1 "$BATCH_ROUNDS"); do
  echo "batch round $round/$BATCH_ROUNDS" >&2
  h2 "batch grpc NextSequence count 1000" floe "$round" 16x8 \
    "http://$floe_grpc/floe.v1.Floe/NextSequence" "$work/next_sequence.bin"
  h2 "batch grpc NextIds snowflake count 1000" floe "$round" 16x8 \
    "http://$floe_grpc/floe.v1.Floe/NextIds" "$work/next_ids.bin"
  http "batch http sequencer count 1000" floe "$round" \
    "http://$floe_http/v1/sequencer/default/k?count=1000"
  http "batch http snowflake count 1000" floe "$round" \
    "http://$floe_http/v1/ids/snowflake?count=1000"
done

python3 scripts/load-table.py "$OUT" | tee "${OUT%.tsv}.md"
echo "(h2load -t1 -D $SECONDS_PER_RUN; wrk -t$WRK_THREADS -c$WRK_CONNS -d${SECONDS_PER_RUN}s; $ROUNDS rounds, batches $BATCH_ROUNDS; $(nproc) cores shared by servers and clients)"
