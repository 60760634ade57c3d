#!/usr/bin/env bash
# make deploycheck: the operations kit checked with the ecosystem's own
# tools, from the Go module proxy only (deploy/tools/tool.sh builds them
# once into ~/.cache/geo-sidecar/tools):
#   - the Helm chart: helm lint --strict and helm template for the default
#     values and the three-region example, the rendered manifests strictly
#     decoded into k8s.io/api types and checked against client-go's
#     structured schema (kubecheck), the rendered config run through
#     `geo-sidecar validate`, and bad values refused at template time (a
#     source cluster the config lacks, a memory limit below the budgets);
#   - the alert rules: promtool check rules and promtool test rules;
#   - the dashboard: every query parses as PromQL (promqlnames);
#   - the Dockerfile: built and run without a container engine (imagecheck).
# Which metric names the dashboard and alerts may use is checked against a
# live sidecar in e2e (TestOpsKitMetricNames).
set -euo pipefail
cd "$(dirname "$0")/.."
t0=$SECONDS
step() { echo "-- $* [$((SECONDS - t0)) s]"; }

step "tools (a cold cache builds helm and promtool: minutes)"
HELM=$(deploy/tools/tool.sh helm)
KUBECHECK=$(deploy/tools/tool.sh kubecheck)
PROMTOOL=$(deploy/tools/tool.sh promtool)
PROMQLNAMES=$(deploy/tools/tool.sh promqlnames)
IMAGECHECK=$(deploy/tools/tool.sh imagecheck)
"$HELM" version --short
"$PROMTOOL" --version | head -1

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
chart=deploy/helm/geo-sidecar
example=examples/helm/three-regions.yaml
CGO_ENABLED=0 go build -o "$out/geo-sidecar" ./cmd/geo-sidecar

step "helm lint --strict: default values, $example"
"$HELM" lint --strict "$chart"
"$HELM" lint --strict "$chart" -f "$example"

small=(--set resources.limits.memory=512Mi --set config.sidecar.receive_budget=256MiB
  --set config.sidecar.send_budget=96MiB --set config.sidecar.readback_budget=32MiB)
for case in default three-regions three-regions-east small-limit; do
  case $case in
    default)            args=() ;;
    three-regions)      args=(-f "$example") ;;
    three-regions-east) args=(-f "$example" --set 'sources={east}') ;;
    small-limit)        args=("${small[@]}") ;; # values.yaml's sizing for 512Mi
  esac
  step "helm template ($case) | kubecheck, geo-sidecar validate on the rendered config"
  "$HELM" template geo-sidecar "$chart" --namespace geo-sidecar "${args[@]}" > "$out/$case.yaml"
  mkdir -p "$out/$case"
  "$KUBECHECK" -extract "config.yaml=$out/$case" "$out/$case.yaml"
  for cfg in "$out/$case"/*; do
    "$out/geo-sidecar" validate --config "$cfg" 2>/dev/null
  done
done

step "helm template refuses a source cluster the config does not have"
if "$HELM" template geo-sidecar "$chart" --set 'sources={nowhere}' > /dev/null 2> "$out/err"; then
  echo "helm template accepted sources={nowhere}" >&2; exit 1
fi
grep -q '"nowhere" is not a cluster of config.clusters' "$out/err" || { cat "$out/err" >&2; exit 1; }

step "helm template refuses a memory limit below the sidecar's budgets + 100 MiB, and a size without a binary unit"
if "$HELM" template geo-sidecar "$chart" --set resources.limits.memory=512Mi > /dev/null 2> "$out/err"; then
  echo "helm template accepted a 512Mi limit with the default budgets (932 MiB)" >&2; exit 1
fi
grep -q 'resources.limits.memory: 512Mi is below what the sidecar may use' "$out/err" || { cat "$out/err" >&2; exit 1; }
if "$HELM" template geo-sidecar "$chart" --set config.sidecar.send_budget=256MB > /dev/null 2> "$out/err"; then
  echo "helm template accepted send_budget=256MB" >&2; exit 1
fi
grep -q 'config.sidecar.send_budget: "256MB" is not a size' "$out/err" || { cat "$out/err" >&2; exit 1; }

step "GOMEMLIMIT: 95 % of the memory limit, unless extraEnv sets it"
want='value: "1020054732"' # 95 % of 1Gi
[ "$(grep -A1 'name: GOMEMLIMIT' "$out/default.yaml" | grep -c "$want")" = "$(grep -c 'kind: Deployment' "$out/default.yaml")" ] ||
  { echo "default render: not every Deployment has GOMEMLIMIT $want" >&2; grep -A1 GOMEMLIMIT "$out/default.yaml" >&2; exit 1; }
"$HELM" template geo-sidecar "$chart" --set-json 'extraEnv=[{"name":"GOMEMLIMIT","value":"700MiB"}]' > "$out/memlimit.yaml"
[ "$(grep -c 'name: GOMEMLIMIT' "$out/memlimit.yaml")" = "$(grep -c 'kind: Deployment' "$out/memlimit.yaml")" ] &&
  grep -A1 'name: GOMEMLIMIT' "$out/memlimit.yaml" | grep -q 'value: 700MiB' ||
  { echo "extraEnv's GOMEMLIMIT: want it alone in each Deployment" >&2; grep -A1 GOMEMLIMIT "$out/memlimit.yaml" >&2; exit 1; }

step "promtool check rules, promtool test rules"
"$PROMTOOL" check rules deploy/prometheus/alerts.yaml
"$PROMTOOL" test rules deploy/prometheus/alerts_test.yaml

step "dashboard and alert queries parse (promqlnames)"
"$PROMQLNAMES" deploy/prometheus/alerts.yaml deploy/grafana/geo-sidecar.json > "$out/names.json"
echo "$(grep -c '"where"' "$out/names.json") metric/label requirements (checked against a live sidecar by e2e TestOpsKitMetricNames)"

step "container image: the Dockerfile built and run without an engine (imagecheck)"
"$IMAGECHECK" -dockerfile Dockerfile -context .

step "deploy check passed"
