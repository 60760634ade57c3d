#!/usr/bin/env bash
# Mutation testing of the data path with gremlins (`make mutate`).
#
#   .ci/mutate.sh [package dir[:file,file...] ...]
#                                     default: marker snapshot subscription
#                                     replicator/entrypath replicator/subsync:follow.go,adminpath.go
#                                     replicator/wire
#   .ci/mutate.sh replicator/subsync:follow.go,adminpath.go
#                                     one file of a package (the package's
#                                     tests run on each of its mutants)
#   .ci/mutate.sh replicator:all      every file of replicator/ (not of the
#                                     packages below it)
#   MUTATE_DRY=1 .ci/mutate.sh ...   list the mutants only (gremlins --dry-run)
#   MUTATE_EXCLUDE='^pair\.go$ ^stats\.go$' .ci/mutate.sh replicator:all
#                                     leave files out (regexps on the path
#                                     in the package directory)
#
# Installs gremlins into $(go env GOPATH)/bin if it is missing (a tool, not
# a module dependency: go.mod is untouched), then mutates one package (or
# the files named of it) at a time with the settings of .ci/gremlins.yaml
# (one worker: the machine is shared; gremlins reads GREMLINS_UNLEASH_WORKERS=2
# from the environment over it, each worker on a copy of its own) and
# prints, per package, gremlins'
# summary, the surviving (LIVED) mutants, the score per file and the
# score: killed (timeouts included) over killed plus lived. NOT COVERED
# mutants are those gremlins does not run: code no test reaches, and
# constant and package-level var declarations, which Go's coverage does
# not instrument (so gremlins never tests them, whatever the tests check).
# Full logs and JSON reports go to bin/mutate/. Not part of `make test`:
# replicator/wire alone has about 900 mutants at 5 to 10 s each (build and
# 2 s of tests), an hour with two workers on a loaded machine; run a file
# at a time while working on it. A TIMED OUT mutant counts as killed:
# most are panics with a lock held (the test's cleanup then waits for
# ever) or stalls, but on a loaded machine a slow run is one too.
set -euo pipefail
cd "$(dirname "$0")/.."

GREMLINS_VERSION=${GREMLINS_VERSION:-v0.6.0}
# The data path: all of replicator/entrypath (the entry pipe and its
# sessions, the read-back, the endpoints, the byte budgets, the receive
# pools) and the subscription sync's core: what loss, duplicates and
# stalls depend on.
pkgs=("$@")
[ ${#pkgs[@]} -gt 0 ] || pkgs=(marker snapshot subscription replicator/entrypath "replicator/subsync:follow.go,adminpath.go" replicator/wire)

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
for arg in "${pkgs[@]}"; do
	p=${arg%%:*}
	files=
	[ "$p" = "$arg" ] || files=${arg#*:}
	[ "$files" != all ] || files=
	p=${p#./}
	p=${p%/}
	name=${p//\//_}
	[ -z "$files" ] || name=${name}_$(echo "$files" | tr ',' '\n' | sed 's/\.go$//' | paste -sd+ -)
	log=$out/$name.log
	json=$out/$name.json
	echo "== mutate ./$p${files:+ ($files)} (log: $log) — $(date -u +%H:%M:%S) UTC"
	# gremlins mutates ./p/... : '/' leaves out the files of subpackages
	# (replicator/wire is a package of its own), so each run is one package.
	excl=(-E '/')
	for e in ${MUTATE_EXCLUDE:-}; do excl+=(-E "$e"); done
	# gremlins has no list of files to include: leave out the others.
	if [ -n "$files" ]; then
		for f in "$p"/*.go; do
			f=${f##*/}
			case $f in *_test.go) continue ;; esac
			case ",$files," in *",$f,"*) ;; *) excl+=(-E "^${f//./\\.}\$") ;; esac
		done
	fi
	# gremlins exits non-zero only for thresholds, none of which are set.
	"$bin" unleash --config .ci/gremlins.yaml ${MUTATE_DRY:+--dry-run} "${excl[@]}" -o "$json" "./$p" >"$log" 2>&1 || {
		echo "gremlins failed on ./$p:"; tail -20 "$log"; exit 1; }
	# Colours off for the counts: gremlins colours them when on a terminal.
	clean=$(sed 's/\x1b\[[0-9;]*m//g' "$log")
	echo "$clean" | grep -E '^ *(LIVED) ' | sed 's/^ */   /' || true
	echo "$clean" | grep -E 'Killed:|Timed out:|Test efficacy|Mutator coverage|completed in' | sed 's/^/   /'
	# Per file: killed (timeouts included) over killed plus lived.
	echo "$clean" | awk '
		$1 ~ /^(KILLED|TIMED|LIVED|NOT)$/ { for (i = 2; i <= NF; i++) if ($i == "at") { split($(i+1), a, ":"); f = a[1] } }
		$1 == "KILLED" || $1 == "TIMED" { k[f]++; seen[f] = 1 }
		$1 == "LIVED"                   { l[f]++; seen[f] = 1 }
		$1 == "NOT" && $2 == "COVERED"  { n[f]++; seen[f] = 1 }
		END { for (f in seen) { run = k[f] + l[f]; s = (run > 0) ? 100 * k[f] / run : 0
		        printf "   %-22s %3d/%-3d = %5.1f%%  (lived %d, not covered %d)\n", f, k[f], run, s, l[f], n[f] } }' | sort
	line=$(echo "$clean" | awk -v p="$p${files:+:$files}" '
		/Killed:/    { gsub(",", ""); k=$2; l=$4; n=$7 }
		/Timed out:/ { gsub(",", ""); t=$3 }
		END { run=k+t+l; s=(run>0)?100*(k+t)/run:0
		      printf "%-14s score %3d/%-3d = %5.1f%%  (killed %d, timed out %d, lived %d; not covered %d)", p, k+t, run, s, k, t, l, n }')
	echo "   $line"
	summary+=("$line")
done
echo "== mutation scores"
printf '   %s\n' "${summary[@]}"
