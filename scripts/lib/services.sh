# Throw-away real servers for floe's tests: each on a fresh temporary directory and a
# non-default loopback port, stopped (by pid) when the calling script exits.
# Source this file, call start_<server>, and read the FLOE_TEST_<SERVER> variable it exports.

FLOE_SERVICE_PIDS=()
FLOE_SERVICE_DIRS=()

stop_services() {
  # SIGINT first: PostgreSQL's fast shutdown (SIGTERM would wait for its clients); then SIGTERM
  # for the servers that ignore SIGINT.
  for pid in "${FLOE_SERVICE_PIDS[@]}"; do
    kill -INT "$pid" 2>/dev/null || true
  done
  sleep 0.5
  for pid in "${FLOE_SERVICE_PIDS[@]}"; do
    kill -TERM "$pid" 2>/dev/null || true
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

# launch DIR: starts DIR/start.sh in the background and records it for stop_services; the
# server's pid (the script execs it) is left in LAUNCHED.
launch() {
  bash "$1/start.sh" &
  LAUNCHED=$!
  FLOE_SERVICE_PIDS+=("$LAUNCHED")
  FLOE_SERVICE_DIRS+=("$1")
}

# wait_ready WHAT DIR CHECK...: runs CHECK until it succeeds (30 s), else prints DIR/server.log.
wait_ready() {
  local what=$1 dir=$2
  shift 2
  for _ in $(seq 1 60); do
    if "$@" >/dev/null 2>&1; then
      return 0
    fi
    sleep 0.5
  done
  echo "$what did not start; its log:" >&2
  tail -20 "$dir/server.log" >&2
  return 1
}

zk_ready() { zk_ask 127.0.0.1 "$1" srvr | grep -q 'Mode: standalone'; }

etcd_ready() {
  (exec 3<>"/dev/tcp/127.0.0.1/$1" && printf 'GET /health HTTP/1.0\r\n\r\n' >&3 && timeout 2 cat <&3) \
    2>/dev/null | grep -q '"health":"true"'
}

# start_zookeeper [NAME]: exports NAME (default FLOE_TEST_ZOOKEEPER) = host:port, and
# NAME_PID, NAME_CFG and NAME_START, so that a test can kill the server and start it again.
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
  cat >"$dir/start.sh" <<START
exec java -cp "/usr/share/java/zookeeper.jar:/usr/share/java/*" \
  org.apache.zookeeper.server.ZooKeeperServerMain "$dir/zoo.cfg" >>"$dir/server.log" 2>&1
START
  launch "$dir"
  pid=$LAUNCHED
  wait_ready ZooKeeper "$dir" zk_ready "$port" || return 1
  export "$name=127.0.0.1:$port" "${name}_PID=$pid" "${name}_CFG=$dir/zoo.cfg" \
    "${name}_START=$dir/start.sh"
  echo "ZooKeeper $(zk_ask 127.0.0.1 "$port" srvr | sed -n 's/^Zookeeper version: \([^-,]*\).*/\1/p') on 127.0.0.1:$port as $name (pid $pid, $dir)"
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
  launch "$dir"
  pid=$LAUNCHED
  wait_ready etcd "$dir" etcd_ready "$cport" || return 1
  export "$name=127.0.0.1:$cport" "${name}_PID=$pid" "${name}_START=$dir/start.sh"
  echo "etcd $(etcd --version | sed -n 's/^etcd Version: //p') on 127.0.0.1:$cport as $name (pid $pid, $dir)"
}

# start_redis [NAME]: exports NAME (default FLOE_TEST_REDIS) = redis://127.0.0.1:PORT, NAME_PID
# and NAME_START (a script that starts the same server again on the same data). Durable
# settings: AOF with an fsync per write, so a killed server loses nothing it acknowledged.
start_redis() {
  local name=${1:-FLOE_TEST_REDIS}
  ensure_package redis-server /usr/bin/redis-server
  local dir port pid
  dir=$(mktemp -d /tmp/floe-redis.XXXXXX)
  port=$(free_port 26390)
  cat >"$dir/start.sh" <<START
exec redis-server --port $port --bind 127.0.0.1 --dir "$dir" --appendonly yes --appendfsync always \
  --save '' --daemonize no >>"$dir/server.log" 2>&1
START
  launch "$dir"
  pid=$LAUNCHED
  wait_ready Redis "$dir" sh -c "redis-cli -p $port ping | grep -q PONG" || return 1
  export "$name=redis://127.0.0.1:$port" "${name}_PID=$pid" "${name}_START=$dir/start.sh"
  echo "Redis $(redis-server --version | sed 's/.*v=\([^ ]*\).*/\1/') on 127.0.0.1:$port as $name (pid $pid, $dir)"
}

# start_postgres [NAME]: exports NAME = postgres://postgres@127.0.0.1:PORT/postgres, NAME_PID
# and NAME_START. PostgreSQL refuses to run as root: it runs as the postgres user, on a data
# directory whose parents are world-executable. Durable defaults (fsync, synchronous_commit).
start_postgres() {
  local name=${1:-FLOE_TEST_POSTGRES}
  local bin=/usr/lib/postgresql/15/bin
  ensure_package postgresql "$bin/postgres"
  local dir port pid as_pg=()
  dir=$(mktemp -d /tmp/floe-pg.XXXXXX)
  chmod 755 "$dir"
  port=$(free_port 25432)
  if [ "$(id -u)" = 0 ]; then
    chown postgres:postgres "$dir"
    as_pg=(setpriv --reuid=postgres --regid=postgres --init-groups)
  fi
  "${as_pg[@]}" "$bin/initdb" -D "$dir/data" -U postgres --auth=trust >"$dir/server.log" 2>&1 || {
    tail -20 "$dir/server.log" >&2
    return 1
  }
  cat >"$dir/start.sh" <<START
exec ${as_pg[*]} $bin/postgres -D "$dir/data" -p $port -k "$dir" -c listen_addresses=127.0.0.1 \
  -c max_connections=200 >>"$dir/server.log" 2>&1
START
  launch "$dir"
  pid=$LAUNCHED
  wait_ready PostgreSQL "$dir" "$bin/pg_isready" -q -h 127.0.0.1 -p "$port" || return 1
  export "$name=postgres://postgres@127.0.0.1:$port/postgres" "${name}_PID=$pid" "${name}_START=$dir/start.sh"
  echo "PostgreSQL $("$bin/postgres" --version | awk '{print $3}') on 127.0.0.1:$port as $name (pid $pid, $dir)"
}

# start_mariadb [NAME]: exports NAME = mysql://root@127.0.0.1:PORT/floe, NAME_PID and
# NAME_START. Durable InnoDB defaults (a log flush per commit).
start_mariadb() {
  local name=${1:-FLOE_TEST_MARIADB}
  ensure_package mariadb-server /usr/sbin/mariadbd
  local dir port pid
  dir=$(mktemp -d /tmp/floe-maria.XXXXXX)
  port=$(free_port 23306)
  mariadb-install-db --no-defaults --datadir="$dir/data" --user="$(id -un)" \
    --auth-root-authentication-method=normal >"$dir/server.log" 2>&1 || {
    tail -20 "$dir/server.log" >&2
    return 1
  }
  cat >"$dir/start.sh" <<START
exec mariadbd --no-defaults --user=$(id -un) --datadir="$dir/data" --socket="$dir/sock" --port=$port \
  --bind-address=127.0.0.1 --skip-log-bin --max-connections=300 >>"$dir/server.log" 2>&1
START
  launch "$dir"
  pid=$LAUNCHED
  wait_ready MariaDB "$dir" mariadb-admin -h127.0.0.1 -P "$port" --protocol=tcp -uroot ping || return 1
  mariadb -h127.0.0.1 -P "$port" --protocol=tcp -uroot -e 'CREATE DATABASE IF NOT EXISTS floe'
  export "$name=mysql://root@127.0.0.1:$port/floe" "${name}_PID=$pid" "${name}_START=$dir/start.sh"
  echo "MariaDB $(mariadbd --version | awk '{print $3}') on 127.0.0.1:$port as $name (pid $pid, $dir)"
}

# --- TLS variants: the same servers, speaking TLS only, with a throw-away CA ---

# make_test_ca DIR: a private CA (DIR/ca.pem) and a server certificate it signed for localhost
# and 127.0.0.1 (DIR/server.pem, key DIR/server.key), for two days.
make_test_ca() {
  local dir=$1
  openssl req -x509 -newkey rsa:2048 -nodes -keyout "$dir/ca.key" -out "$dir/ca.pem" -days 2 \
    -subj "/CN=floe test CA" >/dev/null 2>&1 || return 1
  openssl req -newkey rsa:2048 -nodes -keyout "$dir/server.key" -out "$dir/server.csr" \
    -subj "/CN=localhost" >/dev/null 2>&1 || return 1
  printf '%s\n' "subjectAltName=DNS:localhost,IP:127.0.0.1" "basicConstraints=CA:FALSE" \
    "keyUsage=digitalSignature,keyEncipherment" "extendedKeyUsage=serverAuth" >"$dir/server.ext"
  openssl x509 -req -in "$dir/server.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" \
    -CAcreateserial -out "$dir/server.pem" -days 2 -extfile "$dir/server.ext" >/dev/null 2>&1 \
    || return 1
  chmod 600 "$dir/server.key" "$dir/ca.key"
}

# start_postgres_tls [NAME]: PostgreSQL that accepts TLS connections only (pg_hba hostssl).
# Exports NAME = postgres://postgres@127.0.0.1:PORT/postgres (add ?sslmode=...), NAME_CA (the
# CA's PEM file), NAME_PID.
start_postgres_tls() {
  local name=${1:-FLOE_TEST_POSTGRES_TLS}
  local bin=/usr/lib/postgresql/15/bin
  ensure_package postgresql "$bin/postgres"
  local dir port pid as_pg=()
  dir=$(mktemp -d /tmp/floe-pg-tls.XXXXXX)
  chmod 755 "$dir"
  port=$(free_port 25442)
  mkdir "$dir/tls" && make_test_ca "$dir/tls" || return 1
  chmod 755 "$dir/tls"
  chmod 644 "$dir/tls/ca.pem"
  if [ "$(id -u)" = 0 ]; then
    chown postgres:postgres "$dir" "$dir/tls/server.key" "$dir/tls/server.pem"
    as_pg=(setpriv --reuid=postgres --regid=postgres --init-groups)
  fi
  "${as_pg[@]}" "$bin/initdb" -D "$dir/data" -U postgres --auth=trust >"$dir/server.log" 2>&1 || {
    tail -20 "$dir/server.log" >&2
    return 1
  }
  # TLS only: every TCP line of pg_hba.conf becomes hostssl.
  sed -i 's/^host /hostssl /' "$dir/data/pg_hba.conf"
  cat >"$dir/start.sh" <<START
exec ${as_pg[*]} $bin/postgres -D "$dir/data" -p $port -k "$dir" -c listen_addresses=127.0.0.1 \
  -c ssl=on -c ssl_cert_file="$dir/tls/server.pem" -c ssl_key_file="$dir/tls/server.key" \
  -c max_connections=50 >>"$dir/server.log" 2>&1
START
  launch "$dir"
  pid=$LAUNCHED
  wait_ready PostgreSQL "$dir" "$bin/pg_isready" -q -h 127.0.0.1 -p "$port" || return 1
  export "$name=postgres://postgres@127.0.0.1:$port/postgres" "${name}_CA=$dir/tls/ca.pem" \
    "${name}_PID=$pid"
  echo "PostgreSQL (TLS only) on 127.0.0.1:$port as $name (pid $pid, $dir)"
}

# start_redis_tls [NAME]: Redis on a TLS port only (no plain port, no client certificates).
# Exports NAME = rediss://127.0.0.1:PORT, NAME_CA, NAME_PID.
start_redis_tls() {
  local name=${1:-FLOE_TEST_REDIS_TLS}
  ensure_package redis-server /usr/bin/redis-server
  local dir port pid
  dir=$(mktemp -d /tmp/floe-redis-tls.XXXXXX)
  port=$(free_port 26400)
  make_test_ca "$dir" || return 1
  cat >"$dir/start.sh" <<START
exec redis-server --port 0 --tls-port $port --bind 127.0.0.1 --dir "$dir" \
  --tls-cert-file "$dir/server.pem" --tls-key-file "$dir/server.key" \
  --tls-ca-cert-file "$dir/ca.pem" --tls-auth-clients no --save '' --daemonize no \
  >>"$dir/server.log" 2>&1
START
  launch "$dir"
  pid=$LAUNCHED
  wait_ready Redis "$dir" sh -c "redis-cli --tls --cacert '$dir/ca.pem' -p $port ping | grep -q PONG" \
    || return 1
  export "$name=rediss://127.0.0.1:$port" "${name}_CA=$dir/ca.pem" "${name}_PID=$pid"
  echo "Redis (TLS only) on 127.0.0.1:$port as $name (pid $pid, $dir)"
}

# start_mariadb_tls [NAME]: MariaDB that refuses connections without TLS
# (require_secure_transport). Exports NAME = mysql://root@127.0.0.1:PORT/floe (add
# ?ssl-mode=...), NAME_CA, NAME_PID.
start_mariadb_tls() {
  local name=${1:-FLOE_TEST_MARIADB_TLS}
  ensure_package mariadb-server /usr/sbin/mariadbd
  local dir port pid
  dir=$(mktemp -d /tmp/floe-maria-tls.XXXXXX)
  port=$(free_port 23316)
  make_test_ca "$dir" || return 1
  mariadb-install-db --no-defaults --datadir="$dir/data" --user="$(id -un)" \
    --auth-root-authentication-method=normal >"$dir/server.log" 2>&1 || {
    tail -20 "$dir/server.log" >&2
    return 1
  }
  cat >"$dir/start.sh" <<START
exec mariadbd --no-defaults --user=$(id -un) --datadir="$dir/data" --socket="$dir/sock" --port=$port \
  --bind-address=127.0.0.1 --skip-log-bin --max-connections=100 \
  --ssl-cert="$dir/server.pem" --ssl-key="$dir/server.key" --ssl-ca="$dir/ca.pem" \
  --require-secure-transport=ON >>"$dir/server.log" 2>&1
START
  launch "$dir"
  pid=$LAUNCHED
  wait_ready MariaDB "$dir" mariadb-admin -h127.0.0.1 -P "$port" --protocol=tcp --ssl \
    --ssl-ca="$dir/ca.pem" -uroot ping || return 1
  mariadb -h127.0.0.1 -P "$port" --protocol=tcp --ssl --ssl-ca="$dir/ca.pem" -uroot \
    -e 'CREATE DATABASE IF NOT EXISTS floe'
  export "$name=mysql://root@127.0.0.1:$port/floe" "${name}_CA=$dir/ca.pem" "${name}_PID=$pid"
  echo "MariaDB (TLS only) on 127.0.0.1:$port as $name (pid $pid, $dir)"
}
