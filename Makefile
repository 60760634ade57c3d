# geo-sidecar. The two commands a newcomer needs:
#   make demo   two local Pulsar clusters + the sidecar, active-active
#   make test   unit tests (-race), a fuzz smoke run, the deploy check, then e2e tests against real clusters
# CLUSTERS="east west north" selects the clusters for up/down/status.

SHELL   := /bin/bash
BIN     := bin/geo-sidecar
VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
# The Dockerfile runs the same build command; e2e checks they agree.
BUILD   := CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=$(VERSION)"
CLUSTER := e2e/pulsar/cluster.sh
UNIT_PKGS = $(shell go list ./... | grep -v /e2e)

.PHONY: build test unit fuzzsmoke deploycheck e2e demo bench soak up down status wipe geo fuzz mutate clean

build:
	$(BUILD) -o $(BIN) ./cmd/geo-sidecar

# The four steps below, arranged by .ci/test.sh so that a fresh machine
# spends its time once: the test bed starts and the deploy tools and fuzz
# binaries build (at nice 19) in the background while the unit tests and
# then the e2e tests run; the fuzz smoke and the deploy check come last.
test:
	.ci/test.sh

unit:
	@echo "== unit tests (-race)"
	go test -race -count=1 $(UNIT_PKGS)

# Every fuzz target in the repository (found by .ci/fuzz.sh, not listed
# here), 3 s each, less once 12 targets would exceed 36 s of fuzzing:
# with building and starting the binaries, under a minute in all.
fuzzsmoke:
	@echo "== fuzz smoke: every fuzz target for a few seconds"
	FUZZTIME=3s FUZZBUDGET=36 .ci/fuzz.sh

# The operations kit (deploy/): helm lint/template and Kubernetes schema
# validation of the chart, promtool rule tests, the dashboard's queries,
# the Dockerfile built and run without an engine. Tools from the Go module
# proxy, built once into ~/.cache/geo-sidecar/tools: cold about 8 min on
# 2 cores shared with other builds (helm 4.5 min, promtool 2.5 min), warm
# 6 s. e2e's metric-name check builds promqlnames itself if it is missing.
deploycheck:
	@echo "== deploy check: Helm chart, Kubernetes schemas, promtool rule tests, dashboard queries, container image"
	deploy/check.sh

e2e:
	@echo "== e2e tests against real Pulsar clusters (started if not up; first run resolves Pulsar from Maven Central)"
	@# Three lanes at once (.ci/e2e.sh says which tests run where and how
	@# they keep out of each other's way); E2E_LANES=1 runs one test at a
	@# time.
	.ci/e2e.sh

demo: build
	@echo "== demo: two local clusters, the sidecar active-active between them"
	$(CLUSTER) up east west
	go run ./e2e/demo --binary $(BIN)

up:
	$(CLUSTER) up $(CLUSTERS)

down:
	$(CLUSTER) down $(CLUSTERS)

status:
	$(CLUSTER) status $(CLUSTERS)

wipe:
	$(CLUSTER) wipe $(CLUSTERS)

# Benchmark (not a test): geo-sidecar side by side with Pulsar's built-in
# geo-replication on the same two clusters, plus the direct-produce limit
# and the scale runs. About 95 minutes on 2 cores; writes
# e2e/bench/RESULTS.md and the latest tables in docs/benchmark.md. The
# replicated-subscriptions scale row measures idle after 6 minutes (past
# every partition's first idle follow, at rest, as an operator's cluster
# runs) for 10 minutes, and grows to 2,500 and 10,000 topics both ways
# (10,000 alone takes about 25 minutes: 13 to start up).
BENCH_FLAGS ?= -subs-settle 6m -subs-idle 10m -subs-idle-after 5m -subs-growth 2500,10000
bench: build
	@echo "== benchmark: geo-sidecar vs Pulsar's built-in geo-replication (about 95 minutes)"
	$(CLUSTER) up east west
	go run ./e2e/bench --binary $(BIN) --out e2e/bench/RESULTS.md --page docs/benchmark.md $(BENCH_FLAGS)

# Randomized fault soak (issue 38; make test runs a 75 s version of it,
# TestSoakShort, in the e2e's lane 3): two sidecar
# instances per source cluster active-active east<->west and one-way
# east->north (SOAK_NORTH=0: without north) under load, faults
# drawn from SOAK_SEED (random unless given; printed, and a failing seed
# reproduces its schedule) for SOAK_DURATION, then the drain and a check of
# every partition on both clusters with Pulsar's Java client. The report and
# the sidecars' logs stay in SOAK_OUT (a new temporary directory unless
# given). SOAK_RATE is messages per second per cluster.
SOAK_DURATION ?= 30m
SOAK_SEED     ?=
soak:
	@echo "== soak: $(SOAK_DURATION) of load and faults (the seed is printed below)"
	$(CLUSTER) up east west $(if $(filter 0,$(SOAK_NORTH)),,north)
	SOAK_SEED=$(SOAK_SEED) SOAK_DURATION=$(SOAK_DURATION) go run ./e2e/soak

# The same targets for longer: FUZZTIME=5m make fuzz.
FUZZTIME ?= 30s
fuzz:
	@echo "== fuzz: every fuzz target for $(FUZZTIME)"
	FUZZTIME=$(FUZZTIME) .ci/fuzz.sh

# Mutation testing of the data path (marker, snapshot, subscription,
# replicator) with gremlins, installed if missing; settings in
# .ci/gremlins.yaml. Tens of minutes; not part of make test.
# MUTATE="marker snapshot" selects packages.
mutate:
	.ci/mutate.sh $(MUTATE)

clean:
	rm -rf bin
