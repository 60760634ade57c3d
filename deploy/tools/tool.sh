#!/usr/bin/env bash
# deploy/tools/tool.sh NAME: prints the path of the deploy tool NAME (helm,
# kubecheck, promtool, promqlnames, imagecheck), building it first if it
# is not in the cache yet.
#
# The tools come from the Go module proxy only, pinned in their own Go
# modules under deploy/tools (so the sidecar's go.mod does not grow), and
# are built once into $GEO_TOOLS_CACHE (default ~/.cache/geo-sidecar/tools),
# in a directory keyed by the tool's version and a hash of its module's
# go.mod, go.sum and sources and of the Go version: a changed pin or a new
# Go rebuilds, nothing else does. Helm and promtool take minutes to compile
# on two cores; a cached tool costs nothing.
set -euo pipefail
tags=""
here="$(cd "$(dirname "$0")" && pwd)"
name="${1:?usage: tool.sh helm|kubecheck|promtool|promqlnames|imagecheck}"
case "$name" in
  helm)        mod=helm;       pkg=helm.sh/helm/v4/cmd/helm ;;
  kubecheck)   mod=helm;       pkg=./kubecheck ;;
  # Without service discovery (Prometheus's remove_all_sd build tag):
  # rule tests need none, and the cloud SDKs are most of the compile time.
  promtool)    mod=promtool;   pkg=github.com/prometheus/prometheus/cmd/promtool; tags=remove_all_sd ;;
  promqlnames) mod=promtool;   pkg=./promqlnames ;;
  imagecheck)  mod=imagecheck; pkg=. ;;
  *) echo "tool.sh: unknown tool $name" >&2; exit 2 ;;
esac
dir="$here/$mod"
cd "$dir"
# The version of the module that provides the tool ("local" for our own,
# whose sources then count in the key).
version=local
ldflags=""
srcs=()
case "$pkg" in
  ./*|.)
    srcs=("$pkg"/*.go)
    ;;
  *)
    version="$(go list -f '{{.Module.Version}}' "$pkg")"
    case "$name" in
      helm) ldflags="-X helm.sh/helm/v4/internal/version.version=$version" ;;
      promtool) ldflags="-X github.com/prometheus/common/version.Version=$version" ;;
    esac
    ;;
esac
key="$( { go version; echo "tags=$tags"; cat go.mod; if [[ -f go.sum ]]; then cat go.sum; fi; if ((${#srcs[@]})); then cat "${srcs[@]}"; fi; } | sha256sum | cut -c1-12)"
cache="${GEO_TOOLS_CACHE:-$HOME/.cache/geo-sidecar/tools}/$name-$version-$key"
# One build of a tool at a time: make test builds the tools in the
# background while e2e may ask for promqlnames; the second caller waits for
# the first's build and then finds it cached.
mkdir -p "$(dirname "$cache")"
exec 9>"$cache.lock"
flock 9
if [[ ! -x "$cache/$name" ]]; then
  echo "tool.sh: building $name $version (cached in $cache; helm and promtool take a few minutes the first time)" >&2
  start=$SECONDS
  mkdir -p "$cache.tmp"
  CGO_ENABLED=0 go build -trimpath -tags "$tags" -ldflags "-s -w $ldflags" -o "$cache.tmp/$name" "$pkg"
  rm -rf "$cache" && mv "$cache.tmp" "$cache"
  echo "tool.sh: built $name in $((SECONDS - start)) s" >&2
fi
echo "$cache/$name"
