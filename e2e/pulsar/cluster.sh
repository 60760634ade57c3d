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
#   cluster.sh freeze NAME...     pause the JVM (SIGSTOP); thaw NAME... resumes it
#   cluster.sh wipe   [NAME...]   stop and delete data and logs
#   cluster.sh geo A B TENANT/NS  wire Pulsar's own geo-replication A<->B
#   cluster.sh env    [NAME...]   print NAME_SERVICE_URL / NAME_ADMIN_URL lines
#   cluster.sh classpath          resolve Pulsar and print the classpath file
#   cluster.sh entryfilter        build geo-sidecar's marker EntryFilter NAR
#                                 (deploy/entryfilter) and print its path
#   cluster.sh positions          build geo-sidecar's positions servlet NAR
#                                 (deploy/positions) and print its path
#   cluster.sh token ROLE [SECS]  mint a token for south (HS256; SECS: expiry)
#
# NAMEs default to $CLUSTERS, else "east west". Known names: east, west,
# north, south, far. State lives in $GEO_TESTBED_DIR (default
# ~/.cache/geo-sidecar/testbed), outside the git tree;
# GEO_TESTBED_PORT_OFFSET=N moves every port by N (a private test bed).
#
# far is the cluster behind a WAN: besides its own ports it takes lookups
# on a third port whose answers name the e2e WAN proxy's ports (see
# wan_ports), so clients that enter through the proxy stay behind it.
#
# south is the secure cluster: TLS only on both ports (a CA and a broker
# certificate for IP 127.0.0.1, made with openssl at its first start),
# token and TLS-certificate authentication, authorization on. Its files are
# in $state/south: tls/ca.pem, tls/client-<role>.{pem,key.pem} (TLS-auth
# roles), secret.key (the HS256 token key) and tokens/admin.token (the
# super-user "admin"). The plaintext ports are off.
#
# north runs Pulsar's transaction coordinator (transactions are off on the
# others): standalone creates the coordinator's assign topic itself at
# start, so nothing else needs initialising. e2e/txn_test.go produces in
# transactions there (e2e/pulsar/Txn.java).
#
# A running cluster whose configuration (standalone.conf as "up" would write
# it now) differs from the one it was started with is restarted by "up", so
# that a change to this script or to standalone.conf.in reaches it; the
# changed lines are printed.
#
# Every broker can load geo-sidecar's marker EntryFilter ("geo-sidecar-markers",
# built by "entryfilter" and "up" from deploy/entryfilter with Maven, cached
# per source). It applies only to namespaces or topics whose entry-filter
# policy names it (allowOverrideEntryFilters=true, no broker-wide
# entryFilterNames), so tests that read markers are unaffected. A new NAR is
# loaded at the next start: cluster.sh down, then up.
#
# north's and south's brokers also load geo-sidecar's subscription positions servlet
# ("geo-sidecar-positions", built by "positions" and "up" from
# deploy/positions): GET /geo-sidecar/positions on the web port.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
state=${GEO_TESTBED_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/geo-sidecar/testbed}
heap=${PULSAR_HEAP:-1g}
ready_timeout=${PULSAR_READY_TIMEOUT:-240}

say() { printf '[testbed] %s\n' "$*" >&2; }
die() { printf '[testbed] error: %s\n' "$*" >&2; exit 1; }

# GEO_TESTBED_PORT_OFFSET moves every port of every cluster by that much,
# so a private test bed (with its own GEO_TESTBED_DIR) runs beside the
# shared one; the e2e harness reads the same variable.
offset=${GEO_TESTBED_PORT_OFFSET:-0}
case "$offset" in ''|*[!0-9]*) die "GEO_TESTBED_PORT_OFFSET must be a number, got '$offset'" ;; esac

# ports NAME -> "broker web bookie"
ports() {
  local p
  case "$1" in
    east)  p="6650 8080 3181" ;;
    west)  p="6660 8090 3191" ;;
    north) p="6670 8100 3201" ;;
    south) p="6681 8111 3211" ;;
    far)   p="6690 8120 3221" ;;
    *) die "unknown cluster '$1' (known: east west north south far)" ;;
  esac
  set -- $p
  echo "$(($1 + offset)) $(($2 + offset)) $(($3 + offset))"
}

# wan_ports NAME -> "bind proxy-broker proxy-web" for a cluster reached
# through the e2e WAN proxy (e2e/wan): besides its ordinary ports, the
# broker listens on "bind" for listener "wan", and lookups that arrive there
# answer with the proxy's address (proxy-broker, proxy-web), which forwards
# to "bind" and to the web port. Lookups on the ordinary port answer with
# the ordinary address, so the broker's own client and tests that want no
# WAN bypass the proxy. far has one, and north (the soak's one-way target,
# reached by one sidecar instance through the proxy while the others go
# direct; no test wires Pulsar's geo-replication to north, which would
# register it with these addresses).
wan_ports() {
  case "$1" in
    far) echo "$((6692 + offset)) $((6691 + offset)) $((8121 + offset))" ;;
    north) echo "$((6672 + offset)) $((6671 + offset)) $((8101 + offset))" ;;
    *) return 1 ;;
  esac
}
secure() { [ "$1" = south ]; }
transactions() { [ "$1" = north ]; }
# Clusters whose brokers load geo-sidecar's positions servlet (deploy/positions,
# positions_conf): north, south for its authorization, and east and west,
# where the e2e tests follow subscriptions with sidecar.positions: servlet
# (e2e/positions_follow_test.go). A running east or west started without
# it is restarted by its next "up" (its settings changed).
positions_servlet() { case "$1" in north | south | east | west) return 0 ;; esac; return 1; }
broker_port() { set -- $(ports "$1"); echo "$1"; }
web_port()    { set -- $(ports "$1"); echo "$2"; }
bk_port()     { set -- $(ports "$1"); echo "$3"; }
admin_url() {
  if secure "$1"; then echo "https://127.0.0.1:$(web_port "$1")"; else echo "http://127.0.0.1:$(web_port "$1")"; fi
}
service_url() {
  if secure "$1"; then echo "pulsar+ssl://127.0.0.1:$(broker_port "$1")"; else echo "pulsar://127.0.0.1:$(broker_port "$1")"; fi
}

# scurl NAME ARGS...: curl with the CA and the super-user's token when NAME
# is the secure cluster. The token goes in a header file, not argv, so it
# does not show in ps.
scurl() {
  local name=$1; shift
  if secure "$name"; then
    curl --cacert "$state/$name/tls/ca.pem" -H @"$state/$name/tokens/admin.header" "$@"
  else
    curl "$@"
  fi
}

b64url() { openssl base64 -A | tr '+/' '-_' | tr -d '='; }

# mint_token KEYFILE ROLE [SECONDS]: an HS256 JWT with sub=ROLE (and exp
# when SECONDS is given), as Pulsar's AuthTokenUtils makes them.
mint_token() {
  local key=$1 role=$2 secs=${3:-} header payload sig hexkey
  header=$(printf '{"alg":"HS256"}' | b64url)
  if [ -n "$secs" ]; then
    payload=$(printf '{"sub":"%s","exp":%d}' "$role" $(( $(date +%s) + secs )) | b64url)
  else
    payload=$(printf '{"sub":"%s"}' "$role" | b64url)
  fi
  hexkey=$(od -An -v -tx1 "$key" | tr -d ' \n')
  sig=$(printf '%s.%s' "$header" "$payload" | openssl dgst -sha256 -mac HMAC -macopt "hexkey:$hexkey" -binary | b64url)
  printf '%s.%s.%s\n' "$header" "$payload" "$sig"
}

# client_cert DIR ROLE: a client certificate with CN=ROLE, signed by the CA
# (TLS authentication maps the CN to the role).
client_cert() {
  local dir=$1 role=$2
  [ -s "$dir/client-$role.pem" ] && return 0
  openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$dir/client-$role.key.pem" 2>/dev/null
  openssl req -new -key "$dir/client-$role.key.pem" -subj "/CN=$role" -out "$dir/client-$role.csr" 2>/dev/null
  openssl x509 -req -in "$dir/client-$role.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key.pem" -CAcreateserial \
    -days 3650 -out "$dir/client-$role.pem" 2>/dev/null
  rm -f "$dir/client-$role.csr"
  chmod 600 "$dir/client-$role.key.pem"
}

# secure_files NAME: the CA, the broker's certificate (IP SAN 127.0.0.1
# only, so a client that connects by the name "localhost" is refused: the
# e2e host-name test relies on it), the token key and the super-user's
# token. Made once; kept across restarts (wipe deletes them).
secure_files() {
  local dir="$state/$1" tls="$state/$1/tls"
  command -v openssl >/dev/null || die "openssl is needed for the secure cluster $1"
  mkdir -p "$tls" "$dir/tokens"
  chmod 700 "$dir" "$tls" "$dir/tokens"
  if [ ! -s "$tls/ca.pem" ]; then
    say "making $1's CA and broker certificate (openssl)"
    openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=geo-sidecar test bed CA" \
      -keyout "$tls/ca.key.pem" -out "$tls/ca.pem" 2>/dev/null
    # Pulsar reads PKCS#8 keys; genpkey writes PKCS#8.
    openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$tls/broker.key.pem" 2>/dev/null
    openssl req -new -key "$tls/broker.key.pem" -subj "/CN=$1 broker" -out "$tls/broker.csr" 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n' >"$tls/broker.ext"
    openssl x509 -req -in "$tls/broker.csr" -CA "$tls/ca.pem" -CAkey "$tls/ca.key.pem" -CAcreateserial \
      -days 3650 -extfile "$tls/broker.ext" -out "$tls/broker.pem" 2>/dev/null
    rm -f "$tls/broker.csr" "$tls/broker.ext"
    chmod 600 "$tls"/*.key.pem
  fi
  client_cert "$tls" geo-sidecar-tls
  if [ ! -s "$dir/secret.key" ]; then
    openssl rand 32 >"$dir/secret.key"
    chmod 600 "$dir/secret.key"
  fi
  if [ ! -s "$dir/tokens/admin.token" ]; then
    (umask 077; mint_token "$dir/secret.key" admin >"$dir/tokens/admin.token")
  fi
  (umask 077; printf 'Authorization: Bearer %s\n' "$(cat "$dir/tokens/admin.token")" >"$dir/tokens/admin.header")
}

# secure_conf NAME: the lines appended to a secure cluster's standalone.conf.
secure_conf() {
  local dir="$state/$1" tls="$state/$1/tls"
  cat <<CONF

# Secure cluster (cluster.sh): TLS only, token and TLS authentication,
# authorization.
brokerServicePort=
webServicePort=
brokerServicePortTls=$(broker_port "$1")
webServicePortTls=$(web_port "$1")
tlsCertificateFilePath=$tls/broker.pem
tlsKeyFilePath=$tls/broker.key.pem
tlsTrustCertsFilePath=$tls/ca.pem
tlsAllowInsecureConnection=false
tlsRequireTrustedClientCertOnConnect=false
authenticationEnabled=true
authenticationProviders=org.apache.pulsar.broker.authentication.AuthenticationProviderToken,org.apache.pulsar.broker.authentication.AuthenticationProviderTls
tokenSecretKey=file://$dir/secret.key
# An expired token is challenged within 5 s (the default is 60 s), so the
# token-rotation test does not wait a minute.
authenticationRefreshCheckSeconds=5
authorizationEnabled=true
superUserRoles=admin
# Smaller than the ordinary clusters' 5 MB, so a message from east can be
# too large for south: the e2e test of a failed send's log uses it.
maxMessageSize=2097152
brokerClientTlsEnabled=true
brokerClientTrustCertsFilePath=$tls/ca.pem
brokerClientAuthenticationPlugin=org.apache.pulsar.client.impl.auth.AuthenticationToken
brokerClientAuthenticationParameters=file://$dir/tokens/admin.token
CONF
}

# wan_conf NAME: the lines appended to the standalone.conf of a cluster
# reached through the WAN proxy (PIP-95: a listener per bind address).
wan_conf() {
  set -- $(wan_ports "$1") "$1"
  cat <<CONF

# Behind the e2e WAN proxy (cluster.sh wan_ports): clients that connect to
# the proxy (port $2, forwarded to the "wan" bind address $1) get lookup
# answers naming the proxy; the ordinary listener stays direct.
bindAddresses=wan:pulsar://127.0.0.1:$1
advertisedListeners=internal:pulsar://127.0.0.1:$(broker_port "$4"),internal:http://127.0.0.1:$(web_port "$4"),wan:pulsar://127.0.0.1:$2,wan:http://127.0.0.1:$3
internalListenerName=internal
CONF
}

# txn_conf NAME: the lines appended to the standalone.conf of a cluster
# with transactions. Standalone creates the coordinator's assign topic
# (pulsar/system/transaction_coordinator_assign, one partition) at start
# when it is missing; the transaction buffers' snapshots live in system
# topics (systemTopicEnabled, on everywhere).
txn_conf() {
  cat <<CONF

# Transactions (cluster.sh transactions): one coordinator; the brokers hold
# back open transactions' messages and those after them from dispatch, and
# filter aborted ones.
transactionCoordinatorEnabled=true
CONF
}

# positions_conf NAME: the lines appended to the standalone.conf of a
# cluster that loads the positions servlet (GET /geo-sidecar/positions on
# its web port).
positions_conf() {
  cat <<CONF

# geo-sidecar's subscription positions servlet (deploy/positions), built by
# cluster.sh: one request per broker answers the mark-delete positions and
# individually acknowledged ranges of many subscriptions.
additionalServletDirectory=$state/servlets
additionalServlets=geo-sidecar-positions
# Message TTLs are applied every minute (default 5), so that the e2e test
# of the servlet sees an expiry by TTL within its deadline.
messageExpiryCheckIntervalInMinutes=1
CONF
}

# write_conf NAME FILE: the standalone.conf NAME starts with.
write_conf() {
  local name=$1 file=$2 dir="$state/$1"
  local filters="$state/entryfilters" # built by cmd_up (entryfilter)
  sed -e "s/@CLUSTER@/$name/" -e "s/@BROKER_PORT@/$(broker_port "$name")/" \
      -e "s/@WEB_PORT@/$(web_port "$name")/" -e "s|@ENTRY_FILTERS_DIR@|$filters|" \
      -e "s|@NAR_DIR@|$dir/nar|" "$here/standalone.conf.in" >"$file"
  if secure "$name"; then
    secure_files "$name"
    secure_conf "$name" >>"$file"
  fi
  if wan_ports "$name" >/dev/null; then
    wan_conf "$name" >>"$file"
  fi
  if transactions "$name"; then
    txn_conf "$name" >>"$file"
  fi
  if positions_servlet "$name"; then
    positions_conf "$name" >>"$file"
  fi
  # The NARs' source keys (nar): a broker loads a NAR only at its start, so
  # a new one is a changed setting, and "up" restarts a cluster running an
  # older one (Pulsar ignores the unknown key). Without this a test bed kept
  # across commits ran the servlet of an older checkout.
  local keys
  keys="entryfilter:$(cat "$state/entryfilters/.key" 2>/dev/null || true)"
  if positions_servlet "$name"; then
    keys="$keys,positions:$(cat "$state/servlets/.key" 2>/dev/null || true)"
  fi
  printf '\n# the geo-sidecar NARs this start loads (source keys)\ngeoSidecarNarKeys=%s\n' "$keys" >>"$file"
}

# conf_changed NAME: whether the settings NAME would start with now differ
# from those its running JVM was started with ($state/NAME/standalone.conf);
# prints the changed ones. Comments and blank lines do not count. A
# cluster without that file (started otherwise) counts as unchanged.
conf_changed() {
  local name=$1 dir="$state/$1" now changed
  [ -f "$dir/standalone.conf" ] || return 1
  now=$(mktemp "$dir/standalone.conf.XXXXXX")
  write_conf "$name" "$now"
  changed=$(diff <(settings "$dir/standalone.conf") <(settings "$now") |
    sed -n -e 's/^< /  was: /p' -e 's/^> /  now: /p' || true)
  rm -f "$now"
  [ -n "$changed" ] || return 1
  printf '%s\n' "$changed" >&2
}

settings() { grep -v -e '^[[:space:]]*#' -e '^[[:space:]]*$' "$1" || true; }

names() {
  if [ $# -gt 0 ]; then echo "$@"; else echo "${CLUSTERS:-east west}"; fi
}

# classpath resolves Pulsar once per pom.xml content and caches the result.
# The key is the files' content only (not their paths), so a fresh clone,
# as CI makes, finds the classpath a checkout elsewhere resolved.
classpath() {
  mkdir -p "$state"
  local key cp
  key=$(cat "$here/pom.xml" "$here/settings.xml" | sha256sum | cut -c1-16)
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

# entryfilter builds the NAR of deploy/entryfilter once per content of its
# sources (and the Maven settings), in a copy under $state so the git tree
# gets no target/, and installs it as the only file of $state/entryfilters,
# the brokers' entryFiltersDirectory. Prints the NAR's path.
entryfilter() { nar entryfilter entryfilters "entry filter"; }

# positions builds the NAR of deploy/positions (geo-sidecar's subscription
# positions servlet, an "additional servlet" plugin) the same way and
# installs it as the only file of $state/servlets, the additionalServletDirectory
# of the clusters that load it (positions_conf). Prints the NAR's path.
positions() { nar positions servlets "positions servlet"; }

# nar NAME OUTDIR WHAT: build deploy/NAME into $state/OUTDIR/geo-sidecar-NAME.nar
# once per content of its sources, one build at a time across processes.
nar() {
  local name=$1 outdir=$2 what=$3 src="$here/../../deploy/$1" key
  [ -f "$src/pom.xml" ] || die "no $src/pom.xml"
  src=$(cd "$src" && pwd)
  mkdir -p "$state/$outdir"
  key=$(cd "$src" && find pom.xml src -type f | LC_ALL=C sort | xargs sha256sum | cat - "$here/settings.xml" | sha256sum | cut -c1-16)
  if ! nar_current "$name" "$outdir" "$key"; then
    # One build at a time across processes (e2e packages call "up" at once).
    if command -v flock >/dev/null; then
      ( flock 8; nar_build "$name" "$outdir" "$what" "$src" "$key" ) 8>"$state/$name.lock" || exit 1
    else
      nar_build "$name" "$outdir" "$what" "$src" "$key"
    fi
  fi
  echo "$state/$outdir/geo-sidecar-$name.nar"
}

nar_current() {
  [ -s "$state/$2/geo-sidecar-$1.nar" ] && [ "$(cat "$state/$2/.key" 2>/dev/null)" = "$3" ]
}

nar_build() {
  local name=$1 outdir=$2 what=$3 src=$4 key=$5
  local out="$state/$outdir" build="$state/$name-build" log="$state/$name-maven.log"
  nar_current "$name" "$outdir" "$key" && return 0
  command -v mvn >/dev/null || die "mvn not found: Maven 3 and Java 17 are required"
  say "building the geo-sidecar $what NAR from deploy/$name (Maven; the first time downloads the NAR plugin and takes a few minutes; log: $log)"
  rm -rf "$build"
  mkdir -p "$build"
  cp -R "$src/pom.xml" "$src/src" "$build/"
  local start=$SECONDS rc=0
  # Progress: one line per build step, the test summary and the outcome.
  if ! mvn -B -s "$here/settings.xml" -f "$build/pom.xml" package 2>&1 | tee "$log" |
      { grep --line-buffered -E '^\[INFO\] --- |Tests run: [0-9]+, Failures: [0-9]+, Errors: [0-9]+, Skipped: [0-9]+$|BUILD (SUCCESS|FAILURE)' || true; } |
      sed -u "s/^\[[A-Z]*\] /[testbed] $name: /" >&2; then
    rc=1
  fi
  set -- "$build"/target/geo-sidecar-"$name"-*.nar
  if [ "$rc" != 0 ] || [ ! -s "$1" ]; then
    tail -30 "$log" >&2
    die "the $what did not build (full log: $log)"
  fi
  cp "$1" "$out/geo-sidecar-$name.nar.tmp"
  mv "$out/geo-sidecar-$name.nar.tmp" "$out/geo-sidecar-$name.nar"
  echo "$key" >"$out/.key"
  say "$what built in $((SECONDS - start))s: $out/geo-sidecar-$name.nar"
  local running=""
  for n in east west north south far; do pid_of "$n" >/dev/null 2>&1 && running="$running $n"; done
  [ -z "$running" ] || say "running clusters ($running ) load the new NAR at their next start: cluster.sh down$running; cluster.sh up$running"
}

pid_of() {
  local f="$state/$1/pid" pid
  if [ -f "$f" ]; then
    pid=$(cat "$f")
    if kill -0 "$pid" 2>/dev/null; then echo "$pid"; return 0; fi
  fi
  # The pid file is stale or missing while the cluster's JVM still holds
  # its broker port (two "up"s raced before cmd_up took a lock, and the
  # loser's pid overwrote the winner's): adopt the JVM, so that status,
  # kill and down see it instead of reporting it down and refusing to
  # start over a taken port.
  pid=$(port_owner "$(broker_port "$1")") || return 1
  [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = java ] || return 1
  mkdir -p "$state/$1"
  echo "$pid" >"$f"
  echo "$pid"
}

# port_owner PORT: the pid listening on 127.0.0.1:PORT, if ss can tell.
port_owner() {
  command -v ss >/dev/null || return 1
  ss -ltnpH "sport = :$1" 2>/dev/null | grep -o 'pid=[0-9]*' | head -1 | cut -d= -f2 | grep .
}

is_ready() {
  scurl "$1" -sf -m 3 "$(admin_url "$1")/admin/v2/namespaces/public" 2>/dev/null | grep -q '"public/default"'
}

# can_write creates and deletes a topic: the admin API answers before the
# in-process bookie is registered, and creating a topic needs a ledger.
can_write() {
  local t
  t="$(admin_url "$1")/admin/v2/persistent/public/default/testbed-ready-$$"
  scurl "$1" -sf -m 10 -X PUT "$t" >/dev/null 2>&1 || return 1
  scurl "$1" -sf -m 10 -X DELETE "$t?force=true" >/dev/null 2>&1 || true
}

port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

start_one() {
  local name=$1 dir="$state/$1"
  if pid=$(pid_of "$name"); then
    if ! conf_changed "$name" 2>"$dir/conf.diff"; then
      rm -f "$dir/conf.diff"
      if is_ready "$name"; then say "$name already up (pid $pid)"; return 0; fi
      say "$name running (pid $pid), waiting for it"
      return 0
    fi
    say "$name runs with an older configuration; restarting it. Changed settings:"
    cat "$dir/conf.diff" >&2
    rm -f "$dir/conf.diff"
    stop_one "$name"
  fi
  local wan=""
  if wan_ports "$name" >/dev/null; then set -- $(wan_ports "$name"); wan=$1; fi
  for p in $(ports "$name") $wan; do
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
  write_conf "$name" "$dir/standalone.conf"
  say "starting $name (broker $(service_url "$name"), admin $(admin_url "$name"), heap $heap)"
  # JVM flags follow Pulsar's own bin/pulsar launcher.
  (
    cd "$dir"
    # No descriptor but stdio may live as long as the JVM: not the start
    # lock (cmd_up), nor one a caller holds a lock on (flock LOCKFILE
    # cluster.sh up ...), which the JVM would otherwise hold until it stops.
    for fd in /proc/$BASHPID/fd/*; do
      fd=${fd##*/}
      [ "$fd" -gt 2 ] 2>/dev/null && eval "exec $fd>&-" 2>/dev/null || true
    done
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
  entryfilter >/dev/null
  positions >/dev/null
  mkdir -p "$state"
  for n in $list; do
    # One start at a time per cluster, across processes: e2e packages
    # and sessions sharing the test bed call "up" concurrently.
    if command -v flock >/dev/null; then
      ( flock 9; start_one "$n" ) 9>"$state/$n.lock" || exit 1
    else
      start_one "$n"
    fi
  done
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

# freeze / thaw NAME...: stop (SIGSTOP) and continue (SIGCONT) a cluster's
# JVM, as a long pause would: clients' sends wait in the sockets meanwhile.
cmd_signal() {
  local sig=$1 what=$2
  shift 2
  for n in $(names "$@"); do
    local pid
    pid=$(pid_of "$n") || die "$n is not running"
    say "$what $n (pid $pid)"
    kill "-$sig" "$pid"
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
    if wan_ports "$n" >/dev/null; then
      set -- $(wan_ports "$n")
      echo "${u}_WAN_SERVICE_URL=pulsar://127.0.0.1:$2"
      echo "${u}_WAN_ADMIN_URL=http://127.0.0.1:$3"
      echo "${u}_WAN_UPSTREAM=127.0.0.1:$1"
    fi
    if secure "$n"; then
      echo "${u}_TLS_TRUST_CERTS=$state/$n/tls/ca.pem"
      echo "${u}_ADMIN_TOKEN_FILE=$state/$n/tokens/admin.token"
      echo "${u}_SECRET_KEY=$state/$n/secret.key"
    fi
  done
}

# token ROLE [SECONDS]: a token for the secure cluster, signed with its key.
cmd_token() {
  [ $# -ge 1 ] || die "usage: cluster.sh token ROLE [SECONDS]"
  secure_files south
  mint_token "$state/south/secret.key" "$@"
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
#
# A cluster behind the WAN proxy (far) is registered with its WAN
# addresses (wan_ports), so that Pulsar's own replicator reaches it through
# the proxy like the sidecar does, lookups included: east->far crosses the
# link only while the e2e harness or the benchmark runs the proxy. The
# registration is updated if it exists (a broker builds its replication
# client from it when a replicator first needs one).
cmd_geo() {
  [ $# -eq 3 ] || die "usage: cluster.sh geo A B TENANT/NAMESPACE"
  local a=$1 b=$2 ns=$3 tenant=${3%%/*}
  [ "$tenant" != "$ns" ] || die "namespace must be TENANT/NAMESPACE, got '$ns'"
  for pair in "$a $b" "$b $a"; do
    set -- $pair
    local self=$1 peer=$2
    local peer_admin peer_service
    peer_admin=$(admin_url "$peer") peer_service=$(service_url "$peer")
    if wan_ports "$peer" >/dev/null; then
      set -- $(wan_ports "$peer")
      peer_admin="http://127.0.0.1:$3" peer_service="pulsar://127.0.0.1:$2"
    fi
    local cluster_data="{\"serviceUrl\":\"$peer_admin\",\"brokerServiceUrl\":\"$peer_service\"}"
    http PUT "$(admin_url "$self")/admin/v2/clusters/$peer" "$cluster_data"
    if wan_ports "$peer" >/dev/null; then
      http POST "$(admin_url "$self")/admin/v2/clusters/$peer" "$cluster_data"
    fi
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
    freeze) cmd_signal STOP freezing "$@" ;;
    thaw) cmd_signal CONT thawing "$@" ;;
    status) cmd_status "$@" ;;
    wipe) cmd_wipe "$@" ;;
    geo) cmd_geo "$@" ;;
    env) cmd_env "$@" ;;
    classpath) classpath ;;
    entryfilter) entryfilter ;;
    positions) positions ;;
    token) cmd_token "$@" ;;
    -h|--help|help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed -e '$d' -e 's/^# \{0,1\}//' ;;
    *) die "unknown command '$cmd' (try: up down kill freeze thaw status wipe geo env classpath entryfilter positions token)" ;;
  esac
}

main "$@"
