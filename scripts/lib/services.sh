# Throw-away real servers for floe's tests: each on a fresh temporary directory and a
# non-default loopback port, stopped (by pid) when the calling script exits.
# Source this file, call start_<server>, and read the FLOE_TEST_<SERVER> variable it exports.

FLOE_SERVICE_PIDS=()
FLOE_SERVICE_DIRS=()

stop_services() {
  for pid in "${FLOE_SERVICE_PIDS[@]}"; do
    kill "$pid" 2>/dev/null || true
  done
  for pid in "${FLOE_SERVICE_PIDS[@]}"; do
    wait "$pid" 2>/dev/null || true
  done
  for dir in "${FLOE_SERVICE_DIRS[@]}"; do
    rm -rf "$dir"
  done
}

# ensure_package PACKAGE FILE: installs the Debian package unless FILE exists (retry once).
ensure_package() {
  local package=$1 file=$2
  [ -e "$file" ] && return 0
  echo "installing $package (Debian)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq || true
  apt-get install -y -qq --no-install-recommends "$package" >/dev/null \
    || { sleep 5; apt-get install -y -qq --no-install-recommends "$package" >/dev/null; }
}

# free_port START: the first port from START on that nothing listens on (loopback).
free_port() {
  local port=$1
  while (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do
    port=$((port + 1))
  done
  echo "$port"
}

# ask HOST PORT WORD: sends a ZooKeeper four-letter word and prints the answer.
zk_ask() {
  (exec 3<>"/dev/tcp/$1/$2" && printf '%s' "$3" >&3 && timeout 2 cat <&3) 2>/dev/null
}

# start_zookeeper [NAME]: exports NAME (default FLOE_TEST_ZOOKEEPER) = host:port, and
# NAME_PID and NAME_CFG, so that a test can kill the server and start it again.
start_zookeeper() {
  local name=${1:-FLOE_TEST_ZOOKEEPER}
  ensure_package zookeeper /usr/share/java/zookeeper.jar
  local dir port pid
  dir=$(mktemp -d /tmp/floe-zk.XXXXXX)
  port=$(free_port 21810)
  mkdir -p "$dir/data"
  cat >"$dir/zoo.cfg" <<CFG
tickTime=500
dataDir=$dir/data
clientPort=$port
clientPortAddress=127.0.0.1
admin.enableServer=false
4lw.commands.whitelist=srvr,ruok,stat
minSessionTimeout=1000
maxSessionTimeout=30000
CFG
  java -cp "/usr/share/java/zookeeper.jar:/usr/share/java/*" \
    org.apache.zookeeper.server.ZooKeeperServerMain "$dir/zoo.cfg" >"$dir/server.log" 2>&1 &
  pid=$!
  FLOE_SERVICE_PIDS+=("$pid")
  FLOE_SERVICE_DIRS+=("$dir")
  for _ in $(seq 1 60); do
    if zk_ask 127.0.0.1 "$port" srvr | grep -q 'Mode: standalone'; then
      export "$name=127.0.0.1:$port" "${name}_PID=$pid" "${name}_CFG=$dir/zoo.cfg"
      echo "ZooKeeper $(zk_ask 127.0.0.1 "$port" srvr | sed -n 's/^Zookeeper version: \([^-,]*\).*/\1/p') on 127.0.0.1:$port as $name (pid $pid, $dir)"
      return 0
    fi
    sleep 0.5
  done
  echo "ZooKeeper did not start; its log:" >&2
  tail -20 "$dir/server.log" >&2
  return 1
}

# start_etcd [NAME]: exports NAME (default FLOE_TEST_ETCD) = host:port, NAME_PID, and
# NAME_START, a script that starts the same server again on the same data (for tests that
# kill it).
start_etcd() {
  local name=${1:-FLOE_TEST_ETCD}
  ensure_package etcd-server /usr/bin/etcd
  local dir cport pport pid
  dir=$(mktemp -d /tmp/floe-etcd.XXXXXX)
  cport=$(free_port 23790)
  pport=$(free_port $((cport + 100)))
  cat >"$dir/start.sh" <<START
exec etcd --name floe-test --data-dir "$dir/data" \
  --listen-client-urls http://127.0.0.1:$cport --advertise-client-urls http://127.0.0.1:$cport \
  --listen-peer-urls http://127.0.0.1:$pport --initial-advertise-peer-urls http://127.0.0.1:$pport \
  --initial-cluster floe-test=http://127.0.0.1:$pport --log-level error >>"$dir/server.log" 2>&1
START
  bash "$dir/start.sh" &
  pid=$!
  FLOE_SERVICE_PIDS+=("$pid")
  FLOE_SERVICE_DIRS+=("$dir")
  for _ in $(seq 1 60); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$cport" && printf 'GET /health HTTP/1.0\r\n\r\n' >&3 && timeout 2 cat <&3) 2>/dev/null | grep -q '"health":"true"'; then
      export "$name=127.0.0.1:$cport" "${name}_PID=$pid" "${name}_START=$dir/start.sh"
      echo "etcd $(etcd --version | sed -n 's/^etcd Version: //p') on 127.0.0.1:$cport as $name (pid $pid, $dir)"
      return 0
    fi
    sleep 0.5
  done
  echo "etcd did not start; its log:" >&2
  tail -20 "$dir/server.log" >&2
  return 1
}
