# Throw-away real servers for floe's tests: each on a fresh temporary directory and a
# non-default loopback port, stopped (by pid) when the calling script exits.
# Source this file, call start_<server>, and read the FLOE_TEST_<SERVER> variable it exports.
# The clusters (start_zookeeper_ensemble, start_etcd_cluster) run each member in a network
# namespace of its own instead, on a private address, so that a test can cut it off.

FLOE_SERVICE_PIDS=()
FLOE_SERVICE_DIRS=()
# The clusters' networks (a prefix each: see cluster_net_create), with what runs in them.
FLOE_SERVICE_NETS=()

stop_services() {
  # The clusters first, with SIGKILL (their data is thrown away): a member stopping gracefully can
  # wait forever for a peer a test left cut off (an etcd leader hands its leadership over first).
  for net in "${FLOE_SERVICE_NETS[@]}"; do
    cluster_net_remove "$net"
  done
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

# etcd_ready PORT [HOST]: GET /health answers {"health":"true"} (on 127.0.0.1 unless HOST).
etcd_ready() {
  (exec 3<>"/dev/tcp/${2:-127.0.0.1}/$1" && printf 'GET /health HTTP/1.0\r\n\r\n' >&3 && timeout 2 cat <&3) \
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
  # maxClientCnxns=0: no cap on connections from one address (ZooKeeper's default is 60; the
  # long outage rows run 40 nodes at once, all from 127.0.0.1).
  cat >"$dir/zoo.cfg" <<CFG
tickTime=500
dataDir=$dir/data
clientPort=$port
clientPortAddress=127.0.0.1
admin.enableServer=false
4lw.commands.whitelist=srvr,ruok,stat
minSessionTimeout=1000
maxSessionTimeout=30000
maxClientCnxns=0
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

# start_zookeeper_secure [NAME]: as start_zookeeper (default FLOE_TEST_ZOOKEEPER_SECURE), but the
# server refuses every client that has not authenticated (ZooKeeper 3.7+'s enforce.auth with the
# digest scheme: a session with no credentials is closed with AuthFailed at its first request).
# For the tests of floe's digest credentials and creator-only ACLs.
start_zookeeper_secure() {
  local name=${1:-FLOE_TEST_ZOOKEEPER_SECURE}
  ensure_package zookeeper /usr/share/java/zookeeper.jar
  local dir port pid
  dir=$(mktemp -d /tmp/floe-zk-secure.XXXXXX)
  port=$(free_port 21910)
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
enforce.auth.enabled=true
enforce.auth.schemes=digest
CFG
  cat >"$dir/start.sh" <<START
exec java -cp "/usr/share/java/zookeeper.jar:/usr/share/java/*" \
  org.apache.zookeeper.server.ZooKeeperServerMain "$dir/zoo.cfg" >>"$dir/server.log" 2>&1
START
  launch "$dir"
  pid=$LAUNCHED
  wait_ready ZooKeeper "$dir" zk_ready "$port" || return 1
  export "$name=127.0.0.1:$port" "${name}_PID=$pid" "${name}_CFG=$dir/zoo.cfg"
  echo "ZooKeeper $(zk_ask 127.0.0.1 "$port" srvr | sed -n 's/^Zookeeper version: \([^-,]*\).*/\1/p') (digest auth enforced) on 127.0.0.1:$port as $name (pid $pid, $dir)"
}

# start_zookeeper_tls [NAME]: ZooKeeper whose clients speak TLS (its secureClientPort, Netty,
# PEM key and trust stores) and must show a certificate of its throw-away CA (ZooKeeper's
# default ssl.clientAuth=need). Exports NAME (default FLOE_TEST_ZOOKEEPER_TLS) =
# 127.0.0.1:SECUREPORT, NAME_CA (the CA's PEM), NAME_CERT and NAME_KEY (a client certificate
# and its key, PEM), NAME_PLAIN (its plain-text port, for readiness) and NAME_PID.
start_zookeeper_tls() {
  local name=${1:-FLOE_TEST_ZOOKEEPER_TLS}
  ensure_package zookeeper /usr/share/java/zookeeper.jar
  local dir port sport pid tls
  dir=$(mktemp -d /tmp/floe-zk-tls.XXXXXX)
  port=$(free_port 22010)
  sport=$(free_port $((port + 1)))
  mkdir -p "$dir/data" "$dir/tls"
  tls=$dir/tls
  make_test_ca "$tls" || return 1
  # ZooKeeper's PEM key store: the private key (PKCS#8) and the certificate in one file.
  cat "$tls/server.key" "$tls/server.pem" >"$tls/server-keystore.pem"
  openssl req -newkey rsa:2048 -nodes -keyout "$tls/client.key" -out "$tls/client.csr" \
    -subj "/CN=floe" >/dev/null 2>&1 || return 1
  printf '%s\n' "basicConstraints=CA:FALSE" "keyUsage=digitalSignature,keyEncipherment" \
    "extendedKeyUsage=clientAuth" >"$tls/client.ext"
  openssl x509 -req -in "$tls/client.csr" -CA "$tls/ca.pem" -CAkey "$tls/ca.key" \
    -CAcreateserial -out "$tls/client.pem" -days 2 -extfile "$tls/client.ext" >/dev/null 2>&1 \
    || return 1
  cat >"$dir/zoo.cfg" <<CFG
tickTime=500
dataDir=$dir/data
clientPort=$port
clientPortAddress=127.0.0.1
secureClientPort=$sport
secureClientPortAddress=127.0.0.1
serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory
ssl.keyStore.location=$tls/server-keystore.pem
ssl.keyStore.type=PEM
ssl.trustStore.location=$tls/ca.pem
ssl.trustStore.type=PEM
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
  wait_ready ZooKeeper "$dir" bash -c "exec 3<>/dev/tcp/127.0.0.1/$sport" || return 1
  export "$name=127.0.0.1:$sport" "${name}_CA=$tls/ca.pem" "${name}_CERT=$tls/client.pem" \
    "${name}_KEY=$tls/client.key" "${name}_PLAIN=127.0.0.1:$port" "${name}_PID=$pid"
  echo "ZooKeeper $(zk_ask 127.0.0.1 "$port" srvr | sed -n 's/^Zookeeper version: \([^-,]*\).*/\1/p') (TLS, client certificates) on 127.0.0.1:$sport as $name (pid $pid, $dir)"
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

# make_client_cert DIR NAME CN: a client certificate DIR/NAME.pem (key DIR/NAME.key) for CN,
# signed by the CA of DIR (DIR/ca.pem, DIR/ca.key: make_test_ca's), for two days.
make_client_cert() {
  local dir=$1 name=$2 cn=$3
  openssl req -newkey rsa:2048 -nodes -keyout "$dir/$name.key" -out "$dir/$name.csr" \
    -subj "/CN=$cn" >/dev/null 2>&1 || return 1
  printf '%s\n' "basicConstraints=CA:FALSE" "keyUsage=digitalSignature,keyEncipherment" \
    "extendedKeyUsage=clientAuth" >"$dir/$name.ext"
  openssl x509 -req -in "$dir/$name.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" \
    -CAcreateserial -out "$dir/$name.pem" -days 2 -extfile "$dir/$name.ext" >/dev/null 2>&1 \
    || return 1
  chmod 600 "$dir/$name.key"
}

# start_etcd_secure [NAME]: etcd on https only, asking every client for a certificate of its CA
# (--client-cert-auth), with RBAC on: a root user, and a user floe whose role may read and
# write every key under the prefix /floe (the roots of floe's tests all start with it). Tokens
# last 3 s unused (--auth-token-ttl), so that tests see them expire. Exports NAME =
# 127.0.0.1:PORT, NAME_PID and NAME_DIR, a directory with ca.pem, client.pem and client.key
# (a client certificate of that CA, CN floe-client: no etcd user), password (floe's, with a
# trailing newline), other-ca.pem and other-client.pem/.key (a client certificate of another
# CA, which etcd refuses).
start_etcd_secure() {
  local name=${1:-FLOE_TEST_ETCD_SECURE}
  ensure_package etcd-server /usr/bin/etcd
  ensure_package etcd-client /usr/bin/etcdctl
  local dir cport pport pid other
  dir=$(mktemp -d /tmp/floe-etcd-secure.XXXXXX)
  cport=$(free_port 23890)
  pport=$(free_port $((cport + 100)))
  make_test_ca "$dir" || return 1
  make_client_cert "$dir" client floe-client || return 1
  other=$(mktemp -d "$dir/other.XXXXXX")
  make_test_ca "$other" && make_client_cert "$other" client floe-client || return 1
  cp "$other/ca.pem" "$dir/other-ca.pem"
  cp "$other/client.pem" "$dir/other-client.pem"
  cp "$other/client.key" "$dir/other-client.key"
  rm -rf "$other"
  printf '%s\n' "floe-$RANDOM-$RANDOM" >"$dir/password"
  chmod 600 "$dir/password"
  cat >"$dir/start.sh" <<START
exec etcd --name floe-test --data-dir "$dir/data" \
  --listen-client-urls https://127.0.0.1:$cport --advertise-client-urls https://127.0.0.1:$cport \
  --cert-file "$dir/server.pem" --key-file "$dir/server.key" --trusted-ca-file "$dir/ca.pem" \
  --client-cert-auth --auth-token-ttl 3 \
  --listen-peer-urls http://127.0.0.1:$pport --initial-advertise-peer-urls http://127.0.0.1:$pport \
  --initial-cluster floe-test=http://127.0.0.1:$pport --log-level error >>"$dir/server.log" 2>&1
START
  launch "$dir"
  pid=$LAUNCHED
  wait_ready etcd "$dir" sh -c "curl -sS --max-time 2 --cacert '$dir/ca.pem' --cert '$dir/client.pem' \
    --key '$dir/client.key' https://127.0.0.1:$cport/health | grep -q '\"health\":\"true\"'" \
    || return 1
  # RBAC, with etcdctl (Debian's etcd-client): etcd's JSON gateway cannot be used once client
  # certificates are asked for (it refuses a certificate with a CN).
  local ctl=(etcdctl --endpoints "https://127.0.0.1:$cport" --cacert "$dir/ca.pem"
    --cert "$dir/client.pem" --key "$dir/client.key")
  {
    ETCDCTL_API=3 "${ctl[@]}" user add "root:root-$RANDOM$RANDOM" &&
      ETCDCTL_API=3 "${ctl[@]}" role add floe &&
      ETCDCTL_API=3 "${ctl[@]}" role grant-permission floe --prefix=true readwrite /floe &&
      ETCDCTL_API=3 "${ctl[@]}" user add floe --new-user-password="$(head -1 "$dir/password")" &&
      ETCDCTL_API=3 "${ctl[@]}" user grant-role floe floe &&
      ETCDCTL_API=3 "${ctl[@]}" auth enable
  } >>"$dir/setup.log" 2>&1 || {
    echo "etcd (mTLS): the RBAC set-up failed:" >&2
    tail -5 "$dir/setup.log" >&2
    return 1
  }
  export "$name=127.0.0.1:$cport" "${name}_PID=$pid" "${name}_DIR=$dir"
  echo "etcd (mTLS, RBAC, user floe) on 127.0.0.1:$cport as $name (pid $pid, $dir)"
}

# start_postgres_tls [NAME]: PostgreSQL that accepts TLS connections only (pg_hba hostssl); the
# user floe_cert (made by the tests) is let in by a client certificate the CA signed, CN
# floe_cert, alone. Exports NAME = postgres://postgres@127.0.0.1:PORT/postgres (add
# ?sslmode=...), NAME_CA (the CA's PEM file), NAME_CA_KEY (its key), NAME_PID.
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
  sed -i '1i hostssl all floe_cert 127.0.0.1/32 cert' "$dir/data/pg_hba.conf"
  cat >"$dir/start.sh" <<START
exec ${as_pg[*]} $bin/postgres -D "$dir/data" -p $port -k "$dir" -c listen_addresses=127.0.0.1 \
  -c ssl=on -c ssl_cert_file="$dir/tls/server.pem" -c ssl_key_file="$dir/tls/server.key" \
  -c ssl_ca_file="$dir/tls/ca.pem" -c max_connections=50 >>"$dir/server.log" 2>&1
START
  launch "$dir"
  pid=$LAUNCHED
  wait_ready PostgreSQL "$dir" "$bin/pg_isready" -q -h 127.0.0.1 -p "$port" || return 1
  export "$name=postgres://postgres@127.0.0.1:$port/postgres" "${name}_CA=$dir/tls/ca.pem" \
    "${name}_CA_KEY=$dir/tls/ca.key" "${name}_PID=$pid"
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
  --appendonly yes --appendfsync always \
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

# --- Clusters: three members, each in a network namespace of its own, for partition tests ---
#
# A cluster's network, for a PREFIX (flzk, flet) and a NET (10.77.1, 10.77.2): a bridge PREFIXbr
# in the root namespace at NET.254/24; member i in the namespace PREFIXi, at NET.i on its eth0, a
# veth whose other end, PREFIXvi, is a port of the bridge. The root namespace (the tests, and the
# floe processes they start) reaches every member, and the members each other, through the bridge.
# A partition of member i is `ip link set PREFIXvi down`: its packets vanish, both ways (no
# refusal, no reset: connections time out), from the other members and from the root namespace;
# `ip link set PREFIXvi up` heals it at once, but a connection opened before the cut resumes only
# at its next TCP retransmission (seconds later after a cut of a few seconds).

# cluster_net_remove PREFIX: kills (SIGKILL: their data is thrown away) what still runs in the
# namespaces PREFIX1..3 (a member a test started again, or the servers of a run that died without
# stop_services), then removes them, their veths and the bridge. The veths first: a deleted
# namespace lets go of its links later.
cluster_net_remove() {
  local prefix=$1 i pids
  for _ in $(seq 1 20); do
    pids=$(for i in 1 2 3; do ip netns pids "$prefix$i" 2>/dev/null || true; done)
    [ -n "$pids" ] || break
    kill -KILL $pids 2>/dev/null || true
    sleep 0.25
  done
  for i in 1 2 3; do
    ip link del "${prefix}v$i" 2>/dev/null || true
    ip netns del "$prefix$i" 2>/dev/null || true
  done
  ip link del "${prefix}br" 2>/dev/null || true
}

# run_id PID: PID and its start time, if it runs (a zombie does not), to know it again later.
run_id() {
  local stat
  stat=$(ps -o stat= -p "$1" 2>/dev/null) && [[ $stat != Z* ]] && echo "$1 $(ps -o lstart= -p "$1")"
}

# cluster_net_create PREFIX NET: builds that network afresh, after removing what an earlier run
# left of it. The addresses are fixed, so it refuses while the run that built it is alive (the
# bridge's alias is that run's run_id).
cluster_net_create() {
  local prefix=$1 net=$2 me owner i
  me=$(run_id $$)
  owner=$(cat "/sys/class/net/${prefix}br/ifalias" 2>/dev/null || true)
  if [ -n "$owner" ] && [ "$owner" != "$me" ] && [ "$owner" = "$(run_id "${owner%% *}")" ]; then
    echo "${prefix}br ($net.0/24) belongs to a run still alive (pid ${owner%% *}); not touching it" >&2
    return 1
  fi
  cluster_net_remove "$prefix"
  FLOE_SERVICE_NETS+=("$prefix")
  ip link add "${prefix}br" type bridge && ip link set "${prefix}br" alias "$me" \
    && ip addr add "$net.254/24" dev "${prefix}br" && ip link set "${prefix}br" up || return 1
  for i in 1 2 3; do
    ip netns add "$prefix$i" && ip link add "${prefix}v$i" type veth peer name eth0 netns "$prefix$i" \
      && ip link set "${prefix}v$i" master "${prefix}br" up \
      && ip -n "$prefix$i" addr add "$net.$i/24" dev eth0 \
      && ip -n "$prefix$i" link set lo up && ip -n "$prefix$i" link set eth0 up || return 1
  done
}

# zk_member_ready HOST PORT: the member serves, as the leader or a follower.
zk_member_ready() { zk_ask "$1" "$2" srvr | grep -Eq 'Mode: (leader|follower)'; }

# zk_one_leader NET PORT: exactly one of NET.1..3 answers srvr with Mode: leader.
zk_one_leader() {
  local i leaders=0
  for i in 1 2 3; do
    if zk_ask "$1.$i" "$2" srvr | grep -q 'Mode: leader'; then
      leaders=$((leaders + 1))
    fi
  done
  [ "$leaders" = 1 ]
}

# etcd_status HOST PORT: etcd's Maintenance.Status (JSON), as the member at HOST:PORT sees it.
etcd_status() {
  (exec 3<>"/dev/tcp/$1/$2" \
    && printf 'POST /v3/maintenance/status HTTP/1.0\r\nContent-Length: 2\r\n\r\n{}' >&3 \
    && timeout 2 cat <&3) 2>/dev/null | tail -n 1
}

# etcd_one_leader NET PORT: the members NET.1..3 agree on a leader, and it is one of them.
etcd_one_leader() {
  local i status leader= ids=
  for i in 1 2 3; do
    status=$(etcd_status "$1.$i" "$2")
    [[ $status =~ \"leader\":\"([0-9]+)\" ]] || return 1
    [ -z "$leader" ] || [ "$leader" = "${BASH_REMATCH[1]}" ] || return 1
    leader=${BASH_REMATCH[1]}
    [[ $status =~ \"member_id\":\"([0-9]+)\" ]] || return 1
    ids+=" ${BASH_REMATCH[1]} "
  done
  [ "$leader" != 0 ] && [[ $ids == *" $leader "* ]]
}

# start_zookeeper_ensemble [NAME]: ZooKeeper as an ensemble of three (QuorumPeerMain: the
# ZooKeeperServerMain of start_zookeeper would run each one standalone), member i in the namespace
# flzki at 10.77.1.i (client port 21901, quorum 21902, election 21903). Exports NAME (default
# FLOE_TEST_ZK_ENSEMBLE) = the connect string 10.77.1.1:21901,10.77.1.2:21901,10.77.1.3:21901, and
# for i in 1..3: NAME_i = member i's host:port, NAME_i_PID, NAME_i_START (a script that starts it
# again on the same data, in its namespace, after a kill) and NAME_i_LINK = flzkvi (`ip link set
# flzkvi down` cuts it off, `up` heals it). Ready when every member serves, one as the leader.
# Which one leads: the one whose `srvr` four-letter word answers `Mode: leader`, e.g.
#   printf srvr | timeout 2 socat - TCP:$NAME_1 | grep '^Mode:'
# (the others answer `Mode: follower`; a member without a quorum, or in an election, answers
# "This ZooKeeper instance is not currently serving requests"; seen from outside, a member cut
# off does not answer at all, so connect with a timeout).
start_zookeeper_ensemble() {
  local name=${1:-FLOE_TEST_ZK_ENSEMBLE}
  ensure_package zookeeper /usr/share/java/zookeeper.jar
  ensure_package iproute2 /usr/sbin/ip
  local net=10.77.1 top dir i servers= connect= pids=()
  cluster_net_create flzk "$net" || return 1
  top=$(mktemp -d /tmp/floe-zk-ensemble.XXXXXX)
  FLOE_SERVICE_DIRS+=("$top")
  for i in 1 2 3; do
    servers+="server.$i=$net.$i:21902:21903"$'\n'
    connect+="${connect:+,}$net.$i:21901"
  done
  for i in 1 2 3; do
    dir=$top/$i
    mkdir -p "$dir/data"
    echo "$i" >"$dir/data/myid"
    # ZooKeeper's own default tick (2 s): followers tell the leader of their sessions' requests
    # every half tick, the lag floe's takeover wait is there for (floe_registry::terms).
    cat >"$dir/zoo.cfg" <<CFG
tickTime=2000
initLimit=10
syncLimit=5
dataDir=$dir/data
clientPort=21901
clientPortAddress=$net.$i
admin.enableServer=false
4lw.commands.whitelist=srvr,ruok,stat
minSessionTimeout=1000
maxSessionTimeout=30000
maxClientCnxns=0
$servers
CFG
    cat >"$dir/start.sh" <<START
exec ip netns exec flzk$i java -cp "/usr/share/java/zookeeper.jar:/usr/share/java/*" \
  org.apache.zookeeper.server.quorum.QuorumPeerMain "$dir/zoo.cfg" >>"$dir/server.log" 2>&1
START
    launch "$dir"
    # Out of the shell's job table: no "Killed" notice when a test or stop_services kills it.
    disown "$LAUNCHED"
    pids+=("$LAUNCHED")
  done
  for i in 1 2 3; do
    wait_ready "ZooKeeper member $i" "$top/$i" zk_member_ready "$net.$i" 21901 || return 1
  done
  wait_ready "ZooKeeper ensemble" "$top/1" zk_one_leader "$net" 21901 || return 1
  export "$name=$connect"
  for i in 1 2 3; do
    export "${name}_$i=$net.$i:21901" "${name}_${i}_PID=${pids[i - 1]}" \
      "${name}_${i}_START=$top/$i/start.sh" "${name}_${i}_LINK=flzkv$i"
  done
  echo "ZooKeeper $(zk_ask "$net.1" 21901 srvr | sed -n 's/^Zookeeper version: \([^-,]*\).*/\1/p') ensemble on $connect as $name (pids ${pids[*]}, $top)"
}

# start_etcd_cluster [NAME]: etcd as a cluster of three (m1, m2, m3), member i in the namespace
# fleti at 10.77.2.i (client port 23901, peer port 23902). Exports NAME (default
# FLOE_TEST_ETCD_CLUSTER) = 10.77.2.1:23901,10.77.2.2:23901,10.77.2.3:23901, and for i in 1..3:
# NAME_i = member i's host:port, NAME_i_PID, NAME_i_START (a script that starts it again on the
# same data, in its namespace, after a kill) and NAME_i_LINK = fletvi (`ip link set fletvi down`
# cuts it off, `up` heals it). Ready when every member is healthy and all agree on a leader.
# Which one leads: ask a member for its status,
#   curl -s -m 2 -X POST http://$NAME_1/v3/maintenance/status -d '{}'
# which answers {"header":{"cluster_id":"…","member_id":"…","revision":"…","raft_term":"…"},
# "version":"3.4.23",…,"leader":"…","raftIndex":"…","raftTerm":"…",…} (the IDs are decimal
# uint64s in JSON strings): the leader is the member whose header.member_id equals leader. A
# member that knows no leader (cut off, or in an election) leaves "leader" out and adds
# "errors":["etcdserver: no leader"]; seen from outside, a member cut off does not answer at
# all, so give the request a timeout. etcd 3.4 runs without --pre-vote: a member cut off raises
# its term in vain, and when it comes back its term makes the leader step down and the cluster
# elects again (0 to 5 s here; often the same leader).
start_etcd_cluster() {
  local name=${1:-FLOE_TEST_ETCD_CLUSTER}
  ensure_package etcd-server /usr/bin/etcd
  ensure_package iproute2 /usr/sbin/ip
  local net=10.77.2 top dir i cluster= addrs= pids=()
  cluster_net_create flet "$net" || return 1
  top=$(mktemp -d /tmp/floe-etcd-cluster.XXXXXX)
  FLOE_SERVICE_DIRS+=("$top")
  for i in 1 2 3; do
    cluster+="${cluster:+,}m$i=http://$net.$i:23902"
    addrs+="${addrs:+,}$net.$i:23901"
  done
  for i in 1 2 3; do
    dir=$top/$i
    mkdir -p "$dir"
    # etcd's own log level (info): its leader changes are in server.log.
    cat >"$dir/start.sh" <<START
exec ip netns exec flet$i etcd --name m$i --data-dir "$dir/data" \
  --listen-client-urls http://$net.$i:23901 --advertise-client-urls http://$net.$i:23901 \
  --listen-peer-urls http://$net.$i:23902 --initial-advertise-peer-urls http://$net.$i:23902 \
  --initial-cluster $cluster --initial-cluster-state new \
  --initial-cluster-token ${top##*/} --unsafe-no-fsync >>"$dir/server.log" 2>&1
START
    launch "$dir"
    # Out of the shell's job table: no "Killed" notice when a test or stop_services kills it.
    disown "$LAUNCHED"
    pids+=("$LAUNCHED")
  done
  for i in 1 2 3; do
    wait_ready "etcd member m$i" "$top/$i" etcd_ready 23901 "$net.$i" || return 1
  done
  wait_ready "etcd cluster" "$top/1" etcd_one_leader "$net" 23901 || return 1
  export "$name=$addrs"
  for i in 1 2 3; do
    export "${name}_$i=$net.$i:23901" "${name}_${i}_PID=${pids[i - 1]}" \
      "${name}_${i}_START=$top/$i/start.sh" "${name}_${i}_LINK=fletv$i"
  done
  echo "etcd $(etcd --version | sed -n 's/^etcd Version: //p') cluster on $addrs as $name (pids ${pids[*]}, $top)"
}
