# What the load scripts (scripts/load.sh, scripts/overhead.sh) share: servers started in the
# background and stopped on exit, and gRPC request bodies written byte by byte.
# Source it after setting `work` (a throw-away directory, removed on exit).

pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

# start NAME COMMAND...: runs a server whose first stdout line names its addresses; leaves that
# line in STARTED.
start() {
  local name=$1
  shift
  "$@" >"$work/$name.out" 2>"$work/$name.err" &
  pids+=("$!")
  for _ in $(seq 1 300); do
    if [ -s "$work/$name.out" ]; then
      STARTED=$(head -n1 "$work/$name.out")
      return 0
    fi
    sleep 0.1
  done
  echo "$name did not start:" >&2
  cat "$work/$name.err" >&2
  exit 1
}

# started_addr NAME: the address `NAME=` names in STARTED (grpc, http).
started_addr() { sed -n "s/.*$1=\\([^ ]*\\).*/\\1/p" <<<"$STARTED"; }

# Request bodies: a gRPC frame (uncompressed flag, 4-byte big-endian length) around a protobuf
# message, written byte by byte.
frame() { # frame FILE HEX-OF-MESSAGE
  local hex=$2 len=$((${#2} / 2))
  printf '%s' "00$(printf '%08x' "$len")$hex" | xxd -r -p >"$1"
}
hexs() { printf '%s' "$1" | xxd -p | tr -d '\n'; }
