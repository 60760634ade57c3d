#!/usr/bin/env bash
# cluster.sh: start, stop and inspect named local Pulsar clusters for the
# geo-sidecar test bed and demo. Each cluster is one Pulsar standalone JVM
# (broker + in-process bookie + RocksDB metadata) resolved from Maven Central
# by the pom.xml beside this script. No Docker, no Pulsar tarball.
#
#   cluster.sh up     [NAME...]   start (idempotent) and wait until ready
#   cluster.sh down   [NAME...]   stop (idempotent)
#   cluster.sh status [NAME...]   one line per cluster
#   cluster.sh kill   [NAME...]   stop at once (SIGKILL), as a crash would
#   cluster.sh wipe   [NAME...]   stop and delete data and logs
#   cluster.sh geo A B TENANT/NS  wire Pulsar's own geo-replication A<->B
#   cluster.sh env    [NAME...]   print NAME_SERVICE_URL / NAME_ADMIN_URL lines
#   cluster.sh classpath          resolve Pulsar and print the classpath file
#
# NAMEs default to $CLUSTERS, else "east west". Known names: east, west,
# north. State lives in $GEO_TESTBED_DIR (default ~/.cache/geo-sidecar/testbed),
# outside the git tree.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
state=${GEO_TESTBED_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/geo-sidecar/testbed}
heap=${PULSAR_HEAP:-1g}
ready_timeout=${PULSAR_READY_TIMEOUT:-240}

say() { printf '[testbed] %s\n' "$*" >&2; }
die() { printf '[testbed] error: %s\n' "$*" >&2; exit 1; }

# ports NAME -> "broker web bookie"
ports() {
  case "$1" in
    east)  echo "6650 8080 3181" ;;
    west)  echo "6660 8090 3191" ;;
    north) echo "6670 8100 3201" ;;
    *) die "unknown cluster '$1' (known: east west north)" ;;
  esac
}
broker_port() { set -- $(ports "$1"); echo "$1"; }
web_port()    { set -- $(ports "$1"); echo "$2"; }
bk_port()     { set -- $(ports "$1"); echo "$3"; }
admin_url()   { echo "http://127.0.0.1:$(web_port "$1")"; }
service_url() { echo "pulsar://127.0.0.1:$(broker_port "$1")"; }

names() {
  if [ $# -gt 0 ]; then echo "$@"; else echo "${CLUSTERS:-east west}"; fi
}

# classpath resolves Pulsar once per pom.xml content and caches the result.
classpath() {
  mkdir -p "$state"
  local key cp
  key=$(sha256sum "$here/pom.xml" "$here/settings.xml" | sha256sum | cut -c1-16)
  cp="$state/classpath-$key.txt"
  if [ ! -s "$cp" ]; then
    command -v mvn >/dev/null || die "mvn not found: Maven 3 and Java 17 are required"
    say "resolving Pulsar from Maven Central (the first time downloads ~300 MB and takes a few minutes)"
    if ! mvn -B -q -s "$here/settings.xml" -f "$here/pom.xml" \
        dependency:build-classpath -Dmdep.outputFile="$cp.tmp" >"$state/maven.log" 2>&1; then
      tail -20 "$state/maven.log" >&2
      die "Maven could not resolve Pulsar (full log: $state/maven.log)"
    fi
    mv "$cp.tmp" "$cp"
    say "Pulsar resolved"
  fi
  echo "$cp"
}

pid_of() {
  local f="$state/$1/pid"
  [ -f "$f" ] || return 1
  local pid
  pid=$(cat "$f")
  kill -0 "$pid" 2>/dev/null || return 1
  echo "$pid"
}

is_ready() {
  curl -sf -m 3 "$(admin_url "$1")/admin/v2/namespaces/public" 2>/dev/null | grep -q '"public/default"'
}

# can_write creates and deletes a topic: the admin API answers before the
# in-process bookie is registered, and creating a topic needs a ledger.
can_write() {
  local t
  t="$(admin_url "$1")/admin/v2/persistent/public/default/testbed-ready-$$"
  curl -sf -m 10 -X PUT "$t" >/dev/null 2>&1 || return 1
  curl -sf -m 10 -X DELETE "$t?force=true" >/dev/null 2>&1 || true
}

port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

start_one() {
  local name=$1 dir="$state/$1"
  if pid=$(pid_of "$name"); then
    if is_ready "$name"; then say "$name already up (pid $pid)"; return 0; fi
    say "$name running (pid $pid), waiting for it"
    return 0
  fi
  for p in $(ports "$name"); do
    port_busy "$p" && die "port $p for $name is taken by another process"
  done
  local cp
  cp=$(classpath)
  mkdir -p "$dir/data"
  if [ -d "$dir/data/metadata" ]; then
    # A killed standalone leaves its bookie registered; see StaleLocks.java.
    say "clearing stale registrations in $name's metadata"
    java -cp "$(cat "$cp")" -Dlog4j.configurationFile="$here/log4j2.xml" \
      -Dpulsar.log.file="$dir/stale-locks.log" \
      "$here/StaleLocks.java" "$dir/data/metadata" >"$dir/stale-locks.out" 2>&1 ||
      { tail -20 "$dir/stale-locks.out" >&2; die "could not clear $name's metadata (log: $dir/stale-locks.out)"; }
  fi
  sed -e "s/@CLUSTER@/$name/" -e "s/@BROKER_PORT@/$(broker_port "$name")/" \
      -e "s/@WEB_PORT@/$(web_port "$name")/" "$here/standalone.conf.in" >"$dir/standalone.conf"
  say "starting $name (broker $(service_url "$name"), admin $(admin_url "$name"), heap $heap)"
  # JVM flags follow Pulsar's own bin/pulsar launcher.
  (
    cd "$dir"
    exec java -Xms256m -Xmx"$heap" -XX:MaxDirectMemorySize=512m -XX:+UseG1GC \
      -XX:TieredStopAtLevel=1 -Xss512k -XX:ReservedCodeCacheSize=128m \
      --add-opens java.base/java.io=ALL-UNNAMED \
      --add-opens java.base/java.util.zip=ALL-UNNAMED \
      --add-opens java.base/java.nio=ALL-UNNAMED \
      --add-opens java.base/jdk.internal.misc=ALL-UNNAMED \
      --add-opens java.base/sun.net=ALL-UNNAMED \
      --add-opens java.management/sun.management=ALL-UNNAMED \
      --add-opens jdk.management/com.sun.management.internal=ALL-UNNAMED \
      -Dio.netty.tryReflectionSetAccessible=true \
      -Dbookkeeper.metadata.bookie.drivers=org.apache.pulsar.metadata.bookkeeper.PulsarMetadataBookieDriver \
      -Dbookkeeper.metadata.client.drivers=org.apache.pulsar.metadata.bookkeeper.PulsarMetadataClientDriver \
      -Dlog4j.configurationFile="$here/log4j2.xml" \
      -Dpulsar.log.file="$dir/pulsar.log" \
      -cp "$(cat "$cp")" org.apache.pulsar.PulsarStandaloneStarter \
      -c "$dir/standalone.conf" -nfw -nss -a 127.0.0.1 \
      --metadata-dir "$dir/data/metadata" \
      --bookkeeper-dir "$dir/data/bookkeeper" \
      --bookkeeper-port "$(bk_port "$name")" \
      >"$dir/stdout.log" 2>&1
  ) &
  echo $! >"$dir/pid"
}

wait_ready() {
  local name=$1 start=$SECONDS
  while ! { is_ready "$name" && can_write "$name"; }; do
    if ! pid_of "$name" >/dev/null; then
      tail -30 "$state/$name/stdout.log" "$state/$name/pulsar.log" >&2 2>/dev/null || true
      die "$name exited during start-up (logs in $state/$name)"
    fi
    if [ $((SECONDS - start)) -ge "$ready_timeout" ]; then
      die "$name not ready after ${ready_timeout}s (logs in $state/$name)"
    fi
    sleep 1
  done
  say "$name ready after $((SECONDS - start))s"
}

cmd_up() {
  local list
  list=$(names "$@")
  classpath >/dev/null
  for n in $list; do start_one "$n"; done
  for n in $list; do wait_ready "$n"; done
}

stop_one() {
  local name=$1 pid
  if ! pid=$(pid_of "$name"); then say "$name is not running"; return 0; fi
  say "stopping $name (pid $pid)"
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 30); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 1
  done
  kill -0 "$pid" 2>/dev/null && { say "$name did not stop in 30s, killing"; kill -KILL "$pid" 2>/dev/null || true; }
  rm -f "$state/$name/pid"
}

cmd_down() { for n in $(names "$@"); do stop_one "$n"; done; }

cmd_kill() {
  for n in $(names "$@"); do
    local pid
    if pid=$(pid_of "$n"); then
      say "killing $n (pid $pid)"
      kill -KILL "$pid" 2>/dev/null || true
      while kill -0 "$pid" 2>/dev/null; do sleep 0.2; done
      rm -f "$state/$n/pid"
    fi
  done
}

cmd_status() {
  for n in $(names "$@"); do
    local pid rss="-" st="down"
    if pid=$(pid_of "$n"); then
      rss="$(( $(awk '/VmRSS/ {print $2}' "/proc/$pid/status") / 1024 )) MiB"
      if is_ready "$n"; then st="ready"; else st="starting"; fi
    else pid="-"; fi
    printf '%-6s %-9s pid=%-8s rss=%-9s broker=%s admin=%s\n' "$n" "$st" "$pid" "$rss" "$(service_url "$n")" "$(admin_url "$n")"
  done
}

cmd_wipe() {
  for n in $(names "$@"); do
    stop_one "$n"
    rm -rf "${state:?}/$n"
    say "wiped $n"
  done
}

cmd_env() {
  for n in $(names "$@"); do
    local u
    u=$(echo "$n" | tr '[:lower:]' '[:upper:]')
    echo "${u}_SERVICE_URL=$(service_url "$n")"
    echo "${u}_ADMIN_URL=$(admin_url "$n")"
  done
}

# http METHOD URL [JSON]: fails on any status but 2xx and 409 (exists).
http() {
  local code out
  out=$(mktemp)
  code=$(curl -s -o "$out" -w '%{http_code}' -X "$1" -H 'Content-Type: application/json' \
    ${3:+--data "$3"} "$2")
  case "$code" in
    2??|409) rm -f "$out" ;;
    *) cat "$out" >&2; rm -f "$out"; die "$1 $2 answered $code" ;;
  esac
}

# geo A B TENANT/NS: each cluster registers the other, the tenant allows
# both, the namespace replicates to both. Idempotent.
cmd_geo() {
  [ $# -eq 3 ] || die "usage: cluster.sh geo A B TENANT/NAMESPACE"
  local a=$1 b=$2 ns=$3 tenant=${3%%/*}
  [ "$tenant" != "$ns" ] || die "namespace must be TENANT/NAMESPACE, got '$ns'"
  for pair in "$a $b" "$b $a"; do
    set -- $pair
    local self=$1 peer=$2
    http PUT "$(admin_url "$self")/admin/v2/clusters/$peer" \
      "{\"serviceUrl\":\"$(admin_url "$peer")\",\"brokerServiceUrl\":\"$(service_url "$peer")\"}"
    http PUT "$(admin_url "$self")/admin/v2/tenants/$tenant" \
      "{\"adminRoles\":[],\"allowedClusters\":[\"$a\",\"$b\"]}"
    http POST "$(admin_url "$self")/admin/v2/tenants/$tenant" \
      "{\"adminRoles\":[],\"allowedClusters\":[\"$a\",\"$b\"]}"
    http PUT "$(admin_url "$self")/admin/v2/namespaces/$ns"
    http POST "$(admin_url "$self")/admin/v2/namespaces/$ns/replication" "[\"$a\",\"$b\"]"
  done
  say "Pulsar geo-replication wired: $ns between $a and $b"
}

main() {
  local cmd=${1:-status}
  shift || true
  case "$cmd" in
    up) cmd_up "$@" ;;
    down) cmd_down "$@" ;;
    kill) cmd_kill "$@" ;;
    status) cmd_status "$@" ;;
    wipe) cmd_wipe "$@" ;;
    geo) cmd_geo "$@" ;;
    env) cmd_env "$@" ;;
    classpath) classpath ;;
    -h|--help|help) sed -n '2,18p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' ;;
    *) die "unknown command '$cmd' (try: up down kill status wipe geo env classpath)" ;;
  esac
}

main "$@"
