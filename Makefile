# geo-sidecar. The two commands a newcomer needs:
#   make demo   two local Pulsar clusters + the sidecar, active-active
#   make test   unit tests (-race), then e2e tests against real clusters
# CLUSTERS="east west north" selects the clusters for up/down/status.

SHELL   := /bin/bash
BIN     := bin/geo-sidecar
VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
# The Dockerfile runs the same build command; e2e checks they agree.
BUILD   := CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=$(VERSION)"
CLUSTER := e2e/pulsar/cluster.sh
UNIT_PKGS = $(shell go list ./... | grep -v /e2e)

.PHONY: build test unit e2e demo bench up down status wipe geo fuzz clean

build:
	$(BUILD) -o $(BIN) ./cmd/geo-sidecar

test: unit e2e

unit:
	@echo "== unit tests (-race)"
	go test -race -count=1 $(UNIT_PKGS)

e2e:
	@echo "== e2e tests against real Pulsar clusters (started if not up; first run resolves Pulsar from Maven Central)"
	@# -p 1: the e2e tests and the benchmark's smoke test share the clusters
	@# (and some tests kill and restart them), so one package at a time.
	go test -p 1 -count=1 -timeout 25m ./e2e/...

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
# and a 1,000-topic scale run. About 8 minutes on 2 cores; writes
# e2e/bench/RESULTS.md and the README's Benchmark section.
bench: build
	@echo "== benchmark: geo-sidecar vs Pulsar's built-in geo-replication (about 8 minutes)"
	$(CLUSTER) up east west
	go run ./e2e/bench --binary $(BIN) --out e2e/bench/RESULTS.md --readme README.md

fuzz:
	go test -run='^$$' -fuzz=FuzzParse -fuzztime=30s ./config/

clean:
	rm -rf bin
