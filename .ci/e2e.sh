#!/usr/bin/env bash
# The e2e tests against real Pulsar clusters (`make e2e`), in three lanes
# at once. Most of each lane's time is waiting on fault windows and
# brokers, so together they take about the time of the longest lane.
#
#   lane 1: first the tests that kill, freeze or restart west ($disrupt),
#           then every test not named below (all of north's and south's,
#           so each of those clusters is started by this lane only; every
#           test that takes no cluster lock; every new test);
#   lane 2: the tests of cluster far and its WAN proxy (its addresses are
#           fixed, so they run one at a time): first those that use east
#           alone ($wan, while lane 1 disrupts west), then those that use
#           west ($ha), then $even2;
#   lane 3: starts once lane 1's $disrupt tests have ended, and runs $even3.
#
# A test of lanes 2 and 3 uses east and west beside lane 1's disruptions,
# so it holds them shared (e2e.UseClusters, or NewNamespace with
# GEO_E2E_SHARE_CLUSTERS, set here for those lanes) while a disrupting
# test holds them exclusively (e2e.DisruptClusters): neither sees the
# other's fault. Starting lane 3 after $disrupt, and lane 2 with tests that
# leave west alone, keeps lane 1 from waiting for their tests to end.
#
#   E2E_LANES=1 .ci/e2e.sh   one process, one test at a time
#   .ci/e2e.sh -build        only build the test binaries and the sidecar
#                            into the build cache (.ci/test.sh runs this in
#                            the background while the test bed starts)
#   extra arguments go to every `go test` run (e.g. -v)
set -euo pipefail
cd "$(dirname "$0")/.."

# How the lists were chosen: from the top-level test times of one verbose
# run (`.ci/e2e.sh -v`, 2026-12-07, on the shared 2-core machine), packed so
# that the lanes end together: lane 1 holds what only it can run (about 800
# s), lane 2 the far tests (about 600 s) and the longest of the others, lane
# 3 the remaining tests that hold their clusters shared (about 750 s after
# its late start). Only a test that holds east and west shared (UseClusters,
# or NewNamespace as its first cluster call) and uses no cluster but east
# and west may move to lanes 2 and 3. Re-measure when a lane's end moves by
# minutes: `.ci/e2e.sh -v 2>&1 | tee LOG` and `--- PASS: TestX (Ns)` per lane.
disrupt='TestKillNineUnderLoad|TestTargetOutage'
wan='TestWAN.*|TestBenchWANSmoke'
ha='TestHATargetUnreachableFromActive|TestHASourceUnreachableFromActive'
even2='TestFailoverDrill|TestReadBackRefusedWithDedup|TestDrillLeavesOtherSubscriptionsAlone|TestServletFollowAcknowledged|TestServletRewindNotOverridden|TestServletMovesExclusiveAttached'
# From lane 1 when failback's and the exact drill's north tests came
# (2026-12-07, about 100 s there): east and west only, shared.
even2+='|TestEntryPipeJavaFidelity|TestTargetRefusesForGood|TestReplayedUpdateAfterRewind|TestStartLatestNewTopics'
even2+='|TestActiveActiveExactCounts|TestWireThroughput|TestWireIdleScale|TestInjectedCopiesRefused|TestRegexPicksUpNewTopic|TestWireLastSequenceID|TestReadBackPastTargetTrafficAfterReload|TestFollowHoles.*|TestSubscriptionTail'
even3='TestSubscriptionRewindNotOverridden|TestBenchSmoke|TestTargetTopicTerminatedIdle'
even3+='|TestRestartDeepInLedgerWithDedup|TestSubscriptionStickyNotLockedOut|TestHAKillChainOrder'
even3+='|TestSubscriptionFollowBothSidesKeySharedAutoSplit|TestSubscriptionFollowsLaggingConsumer|TestMarkerKeyRotation'
even3+='|TestFailoverDrillPartitioned|TestDrillSidecarRestartedMidway|TestMarkersOnBusyTopic'
even3+='|TestSubscriptionFollowBothSidesFailover|TestSubscriptionFollowBothSidesShared|TestSubscriptionFollowStandby'
even3+='|TestFailoverCheckSyncOff|TestVerifyContinuousSessionRestart|TestTargetTopicTerminated|TestVerifyContinuous'
even3+='|TestSubscriptionStandbyExclusive|TestReadBackBudgetOneWindow|TestSubscriptionExclusiveRefused'
even3+='|TestWireFollow.*|TestVerify|TestVerifyOlderKey|TestSourceSchemaDeleted|TestIdleAdminCost'
even3+='|TestSwitchover.*|TestServletFollowsSkipAndExpiry|TestTargetUnloadUnderLoadWithDedup|TestSoakShort'
# From lane 1 (2026-12-08: the clean-clone make test's lanes took 1,124,
# 1,008 and 1,021 s, lane 1 the longest by 100 s after failback's batch
# tests grew it): east and west only, shared; about 75 s.
even2+='|TestWireReconnectAndFailover|TestPartitionGrowthFollowed|TestForgedUpdateHasNoEffect|TestReadBackBehindFilteredMarker'
even2+='|TestPartitionedPerKeyOrder|TestFailoverEastToWest|TestForgedOriginOnTarget|TestUnsnapshottedSubscriptionExistsOnRemote|TestWireForwardEntries'
even3+='|TestEntryPipeFidelity|TestRestartRereadsBoundedHistory|TestIdleTopicGetsNoMarkers|TestSigtermUnderLoad'
timeout=40m
# Without cgo, as the sidecar itself is built: the test binaries then use
# pulsar-client-go's pure-Go zstd rather than compiling its C binding (over
# a minute on a cold cache).
export CGO_ENABLED=0

# build PKGS...: compiles the packages' test binaries and the sidecar (as
# e2e.BuildBinary does) into the build cache, so that the lanes' `go test`
# runs only link: three lanes compiling the same packages at once would do
# the work three times.
build() {
	local dir
	dir=$(mktemp -d)
	go test -c -o "$dir/" "$@"
	go build -trimpath -o "$dir/geo-sidecar" ./cmd/geo-sidecar
	rm -rf "$dir"
}
if [ "${1:-}" = -build ]; then
	build ./e2e/...
	echo "e2e: test binaries built"
	exit 0
fi

# Every lane's TestMain brings up east and west if they are down; start
# them here first so that two cluster.sh runs never start the same cluster.
e2e/pulsar/cluster.sh up east west
# The lanes' common packages (./e2e/ and all it imports; after -build
# only a link).
build ./e2e/

if [ "${E2E_LANES:-3}" = 1 ]; then
	# -p 1: the e2e tests and the benchmark's smoke test share the clusters
	# (and some tests kill and restart them), so one package at a time.
	exec go test -p 1 -count=1 -timeout "$timeout" "$@" ./e2e/...
fi

start=$(date +%s)
# lane NAME CMD...: runs CMD with its output prefixed by [NAME]; the exit
# status is CMD's (pipefail).
lane() {
	local name=$1
	shift
	"$@" 2>&1 | sed -u "s/^/[$name] /"
}
ended() { echo "== e2e: $1 ended (exit $2) after $(($(date +%s) - start)) s"; }
gotest() { go test -p 1 -count=1 -timeout "$timeout" "$@"; }

(
	rc=0
	export GEO_E2E_SHARE_CLUSTERS=1
	lane lane2 gotest -run "^($wan)\$" "$@" ./e2e/ ./e2e/bench/ || rc=$?
	lane lane2 gotest -run "^($ha|$even2)\$" "$@" ./e2e/ || rc=$?
	ended "lane 2" $rc
	exit $rc
) &
lane2=$!

rc=0
gotest -run "^($disrupt)\$" "$@" ./e2e/ || rc=$?
ended "lane 1's disrupting tests" $rc

(
	rc=0
	export GEO_E2E_SHARE_CLUSTERS=1
	lane lane3 gotest -run "^($even3)\$" "$@" ./e2e/ ./e2e/bench/ ./e2e/soak/ || rc=$?
	ended "lane 3" $rc
	exit $rc
) &
lane3=$!

gotest -skip "^($disrupt|$wan|$ha|$even2|$even3)\$" "$@" ./e2e/... || rc=$?
ended "lane 1" $rc
rc2=0
wait "$lane2" || rc2=$?
rc3=0
wait "$lane3" || rc3=$?
echo "== e2e: all lanes ended after $(($(date +%s) - start)) s"
[ "$rc" = 0 ] && [ "$rc2" = 0 ] && [ "$rc3" = 0 ]
