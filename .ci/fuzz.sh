#!/usr/bin/env bash
# Runs every fuzz target in the module, one `go test -fuzz` per target (go
# test fuzzes one target at a time), each for FUZZTIME (default 3s).
#
#   FUZZTIME=3s FUZZBUDGET=36 .ci/fuzz.sh   the smoke step of `make test`
#   FUZZTIME=30s .ci/fuzz.sh                `make fuzz`
#   .ci/fuzz.sh -l                          list the targets and exit
#   .ci/fuzz.sh -build                      build the test binaries and exit
#                                           (make test builds them in the
#                                           background, .ci/test.sh)
#
# FUZZBUDGET (seconds, optional) caps the fuzzing time of the whole run:
# each target gets min(FUZZTIME, FUZZBUDGET / targets), at least 1 s, so
# that the smoke step stays under a minute as targets are added.
#
# The targets are found, not listed: every `func FuzzX(f *testing.F)` in a
# _test.go file outside e2e/ and testdata/, so a new target runs without
# anyone remembering to add it here. A failing input is written by go test
# under the package's testdata/fuzz/FuzzX/ and makes this script fail.
set -euo pipefail
cd "$(dirname "$0")/.."

FUZZTIME=${FUZZTIME:-3s}

# "dir name" per target, sorted, e.g. "./marker FuzzDecode".
targets=$(grep -rEo --include='*_test.go' --exclude-dir=e2e --exclude-dir=testdata --exclude-dir=.git \
	'^func Fuzz[A-Za-z0-9_]*\([A-Za-z_][A-Za-z0-9_]* \*testing\.F\)' . |
	sed -E 's|^(.*)/[^/]*_test\.go:func (Fuzz[A-Za-z0-9_]*)\(.*$|\1 \2|' | sort -u)
if [ -z "$targets" ]; then
	echo "fuzz: no fuzz targets found" >&2
	exit 1
fi
if [ "${1:-}" = "-l" ]; then
	echo "$targets"
	exit 0
fi

# spurious OUT NAME: whether a failed run is only Go's fuzzing coordinator
# racing its own -fuzztime deadline (go.dev/issue/75804, fixed in Go 1.27;
# frequent on a loaded machine): the target fails with nothing but
# "context deadline exceeded" and no failing input was written. A real
# failure always writes its input under testdata/fuzz/.
spurious() {
	! grep -q 'Failing input written to' <<<"$1" &&
		grep -A1 -E "^--- FAIL: $2 \(" <<<"$1" | tail -1 | grep -qxE '[[:space:]]*context deadline exceeded'
}

n=$(echo "$targets" | wc -l)
if [ -n "${FUZZBUDGET:-}" ] && [[ $FUZZTIME =~ ^([0-9]+)s$ ]]; then
	each=$((FUZZBUDGET * 1000 / n))
	[ "$each" -ge 1000 ] || each=1000
	[ "$each" -lt $((BASH_REMATCH[1] * 1000)) ] && FUZZTIME=${each}ms
fi
echo "== fuzz: $n targets, $FUZZTIME each"
start=$SECONDS
# One instrumented test binary per package, built once (go test -fuzz would
# rebuild and relink for every target), then one run per target, in the
# package's directory as go test runs it, with go test's corpus cache.
#
# Without cgo: the only C in the build is pulsar-client-go's optional zstd
# binding, which a fuzz binary does not need and which costs more than a
# minute of compiling per build configuration on a cold cache. The package
# with the most dependencies is built first and alone, so that every
# dependency is compiled once, with both cores; separate go commands building
# at once do not share their work and would each compile every dependency
# again (this made the fuzz step 11 minutes on a fresh machine). The others,
# whose dependencies are then cached, build two at a time.
export CGO_ENABLED=0
bindir=$PWD/bin/fuzz
mkdir -p "$bindir"
cache=$(go env GOCACHE)/fuzz
declare -A bins
dirs=$(for dir in $(echo "$targets" | cut -d' ' -f1 | sort -u); do
	echo "$(cd "$dir" && go list -test -deps . | wc -l) $dir"
done | sort -rn | cut -d' ' -f2)
build() {
	local pkg
	pkg=$(cd "$1" && go list .)
	go test -c -fuzz=. -o "$bindir/${pkg//\//_}.test" "$1/"
}
first=$(echo "$dirs" | head -1)
build "$first" || { echo "fuzz: building the test binary of $first failed" >&2; exit 1; }
pids=()
for dir in $(echo "$dirs" | tail -n +2); do
	if [ ${#pids[@]} -ge 2 ]; then
		wait "${pids[0]}" || { echo "fuzz: building the test binaries failed" >&2; exit 1; }
		pids=("${pids[@]:1}")
	fi
	build "$dir" &
	pids+=($!)
done
for pid in "${pids[@]}"; do
	wait "$pid" || { echo "fuzz: building the test binaries failed" >&2; exit 1; }
done
for dir in $dirs; do
	pkg=$(cd "$dir" && go list .)
	bins[$dir]=$bindir/${pkg//\//_}.test
done
echo "   test binaries built in $((SECONDS - start))s"
[ "${1:-}" = "-build" ] && exit 0
while read -r dir name; do
	t0=$SECONDS
	pkg=$(cd "$dir" && go list .)
	note=""
	if ! out=$(cd "$dir" && "${bins[$dir]}" -test.run='^$' -test.fuzz="^${name}\$" -test.fuzztime="$FUZZTIME" \
		-test.fuzzcachedir="$cache/$pkg" -test.timeout=10m -test.paniconexit0 2>&1); then
		if spurious "$out" "$name"; then
			note="  (spurious 'context deadline exceeded' at the end, go.dev/issue/75804: no failing input)"
		else
			echo "$out"
			echo "FAIL fuzz $dir $name (the failing input is under $dir/testdata/fuzz/$name/)" >&2
			exit 1
		fi
	fi
	execs=$(echo "$out" | grep -Eo 'execs: [0-9]+' | tail -1 || true)
	printf '   %-40s %3ds  %s%s\n' "${dir#./} $name" $((SECONDS - t0)) "$execs" "$note"
done <<<"$targets"
echo "== fuzz: $n targets passed in $((SECONDS - start))s"
