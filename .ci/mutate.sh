#!/usr/bin/env bash
# Mutation testing of the data path with gremlins (`make mutate`).
#
#   .ci/mutate.sh [package dir ...]   default: marker snapshot subscription replicator
#   MUTATE_EXCLUDE='^sync\.go$ ^stats\.go$' .ci/mutate.sh replicator
#                                     leave files out (regexps on the path
#                                     in the package directory)
#
# Installs gremlins into $(go env GOPATH)/bin if it is missing (a tool, not
# a module dependency: go.mod is untouched), then mutates one package at a
# time with the settings of .ci/gremlins.yaml (one worker: the machine is
# shared) and prints, per package, gremlins' summary, the surviving (LIVED)
# mutants, and the score: killed (timeouts included) over killed plus
# lived. NOT COVERED mutants are those gremlins does not run: code no test
# reaches, and constant and package-level var declarations, which Go's
# coverage does not instrument (so gremlins never tests them, whatever the
# tests check). Full logs and JSON reports go to bin/mutate/. Not part of
# `make test`: it takes tens of minutes.
set -euo pipefail
cd "$(dirname "$0")/.."

GREMLINS_VERSION=${GREMLINS_VERSION:-v0.6.0}
pkgs=("$@")
[ ${#pkgs[@]} -gt 0 ] || pkgs=(marker snapshot subscription replicator)

bin=$(go env GOPATH)/bin/gremlins
if [ -x "$bin" ]; then
	echo "== gremlins: using $bin"
else
	echo "== gremlins: installing github.com/go-gremlins/gremlins/cmd/gremlins@$GREMLINS_VERSION into $(dirname "$bin")"
	GOFLAGS= go install "github.com/go-gremlins/gremlins/cmd/gremlins@$GREMLINS_VERSION"
fi

# gremlins times each mutant's test run against its coverage run, so that
# run must not come from the test cache (it would take milliseconds and
# turn every slow mutant run into a false TIMED OUT).
export GOFLAGS="${GOFLAGS:+$GOFLAGS }-count=1"

out=bin/mutate
mkdir -p "$out"
summary=()
for p in "${pkgs[@]}"; do
	p=${p#./}
	p=${p%/}
	log=$out/${p//\//_}.log
	json=$out/${p//\//_}.json
	echo "== mutate ./$p (log: $log) — $(date -u +%H:%M:%S) UTC"
	# gremlins mutates ./p/... : '/' leaves out the files of subpackages
	# (replicator/wire is a package of its own), so each run is one package.
	excl=(-E '/')
	for e in ${MUTATE_EXCLUDE:-}; do excl+=(-E "$e"); done
	# gremlins exits non-zero only for thresholds, none of which are set.
	"$bin" unleash --config .ci/gremlins.yaml "${excl[@]}" -o "$json" "./$p" >"$log" 2>&1 || {
		echo "gremlins failed on ./$p:"; tail -20 "$log"; exit 1; }
	# Colours off for the counts: gremlins colours them when on a terminal.
	clean=$(sed 's/\x1b\[[0-9;]*m//g' "$log")
	echo "$clean" | grep -E '^ *(LIVED) ' | sed 's/^ */   /' || true
	echo "$clean" | grep -E 'Killed:|Timed out:|Test efficacy|Mutator coverage|completed in' | sed 's/^/   /'
	line=$(echo "$clean" | awk -v p="$p" '
		/Killed:/    { gsub(",", ""); k=$2; l=$4; n=$7 }
		/Timed out:/ { gsub(",", ""); t=$3 }
		END { run=k+t+l; s=(run>0)?100*(k+t)/run:0
		      printf "%-14s score %3d/%-3d = %5.1f%%  (killed %d, timed out %d, lived %d; not covered %d)", p, k+t, run, s, k, t, l, n }')
	echo "   $line"
	summary+=("$line")
done
echo "== mutation scores"
printf '   %s\n' "${summary[@]}"
