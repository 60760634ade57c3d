#!/usr/bin/env bash
# The e2e tests against real Pulsar clusters (`make e2e`), in two lanes at
# once. The second lane holds the tests that need cluster far and the WAN
# proxy in front of it (its addresses are fixed, so they run one at a
# time), plus east/west-only tests chosen to even the lanes' lengths (the
# drills, a deep restart); the first lane holds all the others, and every
# test of north and south (each of those clusters is started by one lane
# only). Most of each lane's time is waiting on fault windows and brokers,
# so together they take about the time of the longer lane. Tests of one
# lane that kill, freeze or restart a cluster the other lane uses hold
# that cluster's lock (e2e.DisruptClusters, UseClusters).
#
#   E2E_LANES=1 .ci/e2e.sh   one process, one test at a time
#   extra arguments go to both `go test` runs (e.g. -v)
set -euo pipefail
cd "$(dirname "$0")/.."

# The second lane: every test that opens e2e.FarWAN or the benchmark's WAN
# rows, then east/west tests that even out the lanes (about 370 s: on a
# fresh machine on 2026-12-07 the first lane took 1,559 s and the second
# 880 s before the last five of them moved here).
far='TestWAN.*|TestHATargetUnreachableFromActive|TestHASourceUnreachableFromActive|TestBenchWANSmoke'
even='TestFailoverDrill|TestDrillLeavesOtherSubscriptionsAlone|TestFailoverDrillPartitioned|TestMarkersOnBusyTopic|TestFailoverCheckSyncOff|TestDrillSidecarRestartedMidway|TestRestartDeepInLedgerWithDedup|TestTargetTopicTerminatedIdle|TestSubscriptionRewindNotOverridden|TestSubscriptionStickyNotLockedOut|TestReadBackRefusedWithDedup|TestSubscriptionFollowBothSidesKeySharedAutoSplit'
lane2="^($far|$even)\$"
timeout=40m
# Without cgo, as the sidecar itself is built: the test binaries then use
# pulsar-client-go's pure-Go zstd rather than compiling its C binding (over
# a minute on a cold cache).
export CGO_ENABLED=0

# Both lanes' TestMain bring up east and west if they are down; start them
# here first so that two cluster.sh runs never start the same cluster.
e2e/pulsar/cluster.sh up east west

if [ "${E2E_LANES:-2}" = 1 ]; then
	# -p 1: the e2e tests and the benchmark's smoke test share the clusters
	# (and some tests kill and restart them), so one package at a time.
	exec go test -p 1 -count=1 -timeout "$timeout" "$@" ./e2e/...
fi

start=$(date +%s)
go test -p 1 -count=1 -timeout "$timeout" -run "$lane2" "$@" ./e2e/ ./e2e/bench/ 2>&1 | sed -u 's/^/[lane2] /' &
farpid=$!
rc=0
go test -p 1 -count=1 -timeout "$timeout" -skip "$lane2" "$@" ./e2e/... || rc=$?
echo "== e2e: the first lane ended (exit $rc) after $(( $(date +%s) - start )) s; waiting for the second"
farrc=0
wait "$farpid" || farrc=$?
echo "== e2e: the second lane ended (exit $farrc) after $(( $(date +%s) - start )) s"
[ "$rc" = 0 ] && [ "$farrc" = 0 ]
