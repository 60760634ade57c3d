#!/usr/bin/env bash
# make test: the unit tests (-race), the e2e tests against real local Pulsar
# clusters, every fuzz target briefly and the deploy check, arranged so that
# a fresh machine spends its time once:
#
#   - the test bed (Pulsar resolved from Maven Central, the entry filter NAR
#     built, the east and west JVMs started) comes up in the background from
#     the start: mostly downloads and waiting, ready by the time the unit
#     tests end;
#   - the e2e test binaries and the sidecar build in the background at the
#     lowest CPU priority (nice 19, taking only the CPU the unit tests
#     leave idle) into the build cache, so e2e starts by linking, not
#     compiling;
#   - then, in the same way, what only the last steps need (the deploy
#     tools helm, promtool and the others, and the instrumented fuzz
#     binaries), which also takes the CPU the e2e tests leave idle (e2e
#     spends most of its time waiting on brokers and fault windows);
#   - then the fuzz smoke and the deploy check run on what is built.
#
# Each step prints its start with the seconds since the start; the
# background steps' output goes to bin/test-logs/ and is printed when a
# step fails. Any failing step fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."

t0=$SECONDS
step() { echo "== [$((SECONDS - t0)) s] $*"; }
logs=bin/test-logs
mkdir -p "$logs"

# waitfor PID NAME LOG: waits for a background step, printing its log if it
# failed.
waitfor() {
	if ! wait "$1"; then
		echo "make test: $2 failed; its output ($3):" >&2
		cat "$3" >&2
		exit 1
	fi
}

step "in the background: the test bed (east, west), log $logs/testbed.log"
e2e/pulsar/cluster.sh up east west >"$logs/testbed.log" 2>&1 &
bed=$!
step "in the background at nice 19: the e2e test binaries, log $logs/e2ebuild.log; then the deploy tools and the fuzz binaries, log $logs/prebuild.log"
nice -n 19 .ci/e2e.sh -build >"$logs/e2ebuild.log" 2>&1 &
e2eb=$!
(
	# After the e2e build (e2e needs it first): kill -0 polls a sibling,
	# which wait cannot.
	while kill -0 $e2eb 2>/dev/null; do sleep 1; done
	for tool in promqlnames imagecheck kubecheck promtool helm; do
		nice -n 19 deploy/tools/tool.sh "$tool" >/dev/null
	done
	nice -n 19 .ci/fuzz.sh -build
) >"$logs/prebuild.log" 2>&1 &
pre=$!
# Leave no background step running if this script stops early.
trap 'kill $bed $e2eb $pre 2>/dev/null || true' EXIT

step "unit tests (-race)"
make --no-print-directory unit

step "waiting for the test bed"
waitfor "$bed" "starting the test bed" "$logs/testbed.log"
tail -n 3 "$logs/testbed.log"

step "waiting for the e2e test binaries"
waitfor "$e2eb" "building the e2e test binaries" "$logs/e2ebuild.log"

step "e2e"
make --no-print-directory e2e

step "waiting for the background builds"
waitfor "$pre" "building the deploy tools and fuzz binaries" "$logs/prebuild.log"
grep -E '^tool.sh: built|test binaries built' "$logs/prebuild.log" || true

step "fuzz smoke"
make --no-print-directory fuzzsmoke

step "deploy check"
make --no-print-directory deploycheck

step "make test passed"
