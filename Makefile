# Quarry's build. `make test` is the one command that runs every check and test; CI
# (.ci/run) runs exactly that. `make run` starts the whole system in one process.

SHELL      := /usr/bin/env bash
MODULES    := gen platform services/search services/agent gateway cmd/quarry deploy
TOOLS_DIR  := $(CURDIR)/.tools/bin
export PATH := $(TOOLS_DIR):$(PATH)

BUF_VERSION                := v1.75.0
PROTOC_GEN_GO_VERSION      := v1.36.12
PROTOC_GEN_GO_GRPC_VERSION := v1.6.2
STATICCHECK_VERSION        := v0.8.2

.PHONY: all run test check fmt vet staticcheck lint generate check-generated build-standalone unit fuzz bench tools

all: test

## run: start search, agent and gateway in one process with the example KB, and show each tier answering
run:
	go run ./cmd/quarry up

## test: every check and test (what CI runs)
test: check unit fuzz

check: fmt vet staticcheck lint check-generated build-standalone build-other-os

# gofmt's own failures (a file it cannot parse or read) fail the check too, and so does
# a tree git lists no Go files in (not a clone): gofmt -l without files reads stdin.
fmt:
	@files=$$(git ls-files '*.go' | grep -v '^gen/') || { echo "fmt: git lists no Go files: run make in a git clone of Quarry" >&2; exit 1; }; \
	out=$$(gofmt -l $$files) || { echo "fmt: gofmt failed on the files above" >&2; exit 1; }; \
	if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi

vet:
	@for m in $(MODULES); do (cd $$m && go vet ./...) || exit 1; done

## staticcheck: bugs, dead code and deprecated APIs that vet does not report
staticcheck: $(TOOLS_DIR)/staticcheck
	@for m in $(MODULES); do (cd $$m && staticcheck ./...) || exit 1; done

## lint: buf lint (STANDARD + comments) on proto/
lint: tools
	buf lint

## generate: regenerate gen/ from proto/
generate: tools
	buf generate

# check-generated fails when gen/ differs from what the protos generate.
check-generated: tools
	@tmp=$$(mktemp -d); trap 'rm -rf $$tmp' EXIT; \
	buf generate -o $$tmp && \
	if ! diff -r -x go.mod -x go.sum -x doc.go $$tmp/gen gen >/dev/null; then \
		echo "gen/ is stale: run 'make generate' and commit the result"; diff -r -x go.mod -x go.sum -x doc.go $$tmp/gen gen | head -20; exit 1; \
	fi

# Polyglot clients (clients/): Python and TypeScript stubs generated from proto/ by
# buf.gen.clients.yaml, and example clients that cmd/quarry/clients_test.go runs against
# a live Quarry. Stubs are checked like gen/; buf breaking keeps stubs generated from an
# older main working.
.PHONY: client-deps generate-clients check-generated-clients breaking
check: check-generated-clients breaking
unit: client-deps

## client-deps: install protoc, grpc_python_plugin, python3-grpcio (apt, as root) and clients/node's pinned npm packages
client-deps:
	@clients/install-deps.sh

CLIENT_STUBS := clients/python/quarry clients/node/src/gen

## generate-clients: regenerate the Python and TypeScript stubs in clients/ from proto/
generate-clients: tools client-deps
	rm -rf $(CLIENT_STUBS)
	buf generate --template buf.gen.clients.yaml

check-generated-clients: tools client-deps
	@tmp=$$(mktemp -d); trap 'rm -rf $$tmp' EXIT; \
	buf generate --template buf.gen.clients.yaml -o $$tmp && \
	for d in $(CLIENT_STUBS); do \
		if ! diff -r -x __pycache__ $$tmp/$$d $$d >/dev/null; then \
			echo "$$d is stale: run 'make generate-clients' and commit the result (stubs are generated with libprotoc 3.21.12; this machine has $$(protoc --version))"; \
			diff -r -x __pycache__ $$tmp/$$d $$d | head -20; exit 1; \
		fi; \
	done

# breaking compares proto/ with main: the local branch, or origin/main in a CI checkout
# that has no local main. On main itself with proto/ as committed (CI's clone of main),
# main is this very proto/, so it compares with proto/ before its last change instead.
# BREAKING_AGAINST=<buf input> compares with something else.
## breaking: buf breaking (FILE rules) against the main branch
breaking: tools
	@against='$(BREAKING_AGAINST)'; \
	if [ -z "$$against" ]; then \
		if git rev-parse -q --verify refs/heads/main >/dev/null; then main=refs/heads/main; \
		elif git rev-parse -q --verify refs/remotes/origin/main >/dev/null; then main=refs/remotes/origin/main; \
		else echo "breaking: no main branch to compare proto/ with: git fetch origin main, or set BREAKING_AGAINST"; exit 1; fi; \
		against=".git#ref=$$(git rev-parse $$main)"; \
		if [ "$$(git rev-parse HEAD)" = "$$(git rev-parse $$main)" ] && [ -z "$$(git status --porcelain -- proto)" ]; then \
			last=$$(git log -1 --format=%H -- proto); \
			if ! before=$$(git rev-parse -q --verify "$$last^"); then \
				if [ "$$(git rev-parse --is-shallow-repository)" = true ]; then echo "breaking: a shallow clone lacks proto/ before its last change: git fetch --unshallow, or set BREAKING_AGAINST" >&2; exit 1; fi; \
				echo "breaking: proto/ has no earlier version to compare with"; exit 0; \
			fi; \
			against=".git#ref=$$before"; \
		fi; \
	fi; \
	echo "buf breaking --against $$against"; buf breaking --against "$$against"

# build-standalone proves every module builds on its own (relative replace lines), as
# a user vendoring one service would build it.
build-standalone:
	@for m in $(MODULES); do (cd $$m && GOWORK=off go build ./...) || { echo "module $$m does not build with GOWORK=off"; exit 1; }; done

# build-other-os proves the README's first command compiles where developers run it:
# macOS and Windows (the tree package once used a Linux-only call).
.PHONY: build-other-os
build-other-os:
	@for os in darwin windows; do GOOS=$$os GOARCH=amd64 go build -o /dev/null ./cmd/quarry || { echo "cmd/quarry does not build for $$os"; exit 1; }; done

# The services' own modules, where the concurrency is (caches, generation views, drains,
# limits), run under the race detector; the end-to-end and deployment modules, which
# start whole systems and would take several times longer, run without it.
RACE_MODULES := platform services/search services/agent gateway
unit:
	@for m in $(MODULES); do \
		race=; case " $(RACE_MODULES) " in *" $$m "*) race=-race;; esac; \
		(cd $$m && go test $$race -count=1 ./...) || exit 1; \
	done

# The gateway's Redis cache is tested against a real redis-server, which the tests start
# on a free loopback port; redis-deps installs it (apt, as root) when it is missing.
.PHONY: redis-deps
unit: redis-deps
bench: redis-deps

## redis-deps: install redis-server (apt-get, as root) for the Redis cache tests and benchmarks
redis-deps:
	@command -v redis-server >/dev/null 2>&1 || { \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
			echo "redis-deps: apt-get install redis-server"; log=$$(mktemp); \
			{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends redis-server; } >$$log 2>&1 \
				|| { cat $$log; rm -f $$log; echo "redis-deps: apt-get install redis-server failed" >&2; exit 1; }; \
			rm -f $$log; \
		else \
			echo "redis-deps: the Redis cache tests need redis-server on PATH: apt-get install -y redis-server (as root)" >&2; exit 1; \
		fi; }

# The race detector needs cgo and so a C compiler, which a machine with only Go lacks (go
# then turns cgo off and -race fails); race-deps installs gcc (apt-get, as root).
.PHONY: race-deps
unit: race-deps

## race-deps: install gcc (apt-get, as root) for go test -race
race-deps:
	@cc=$$(go env CC); command -v "$${cc%% *}" >/dev/null 2>&1 || { \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
			echo "race-deps: apt-get install gcc libc6-dev"; log=$$(mktemp); \
			{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends gcc libc6-dev; } >$$log 2>&1 \
				|| { cat $$log; rm -f $$log; echo "race-deps: apt-get install gcc libc6-dev failed" >&2; exit 1; }; \
			rm -f $$log; \
		else \
			echo "race-deps: go test -race needs a C compiler ($$cc) on PATH: apt-get install -y gcc libc6-dev (as root)" >&2; exit 1; \
		fi; }; \
	[ "$$(go env CGO_ENABLED)" = 1 ] || { echo "race-deps: go test -race needs cgo: unset CGO_ENABLED (it is $$(go env CGO_ENABLED))" >&2; exit 1; }

# fuzz runs every fuzz target briefly on top of its seed corpus (the seeds already run
# in unit); `make fuzz FUZZTIME=5m` digs deeper. scripts/fuzz.sh repeats a run once
# when Go 1.26's fuzz coordinator reports only its own deadline race (go.dev/issue/75804).
FUZZTIME ?= 3s
FUZZ_TARGETS := platform/text:FuzzTokens platform/text:FuzzWordsMatchesReference platform/kbid:FuzzValidMatchesTheRule \
	services/search/tree:FuzzCleanPath services/search/tree:FuzzParseFrontMatter services/search/tree:FuzzParseScope \
	services/search/tree:FuzzFastFrontMatterMatchesYAML services/search/rank:FuzzReadCorpus
fuzz:
	@scripts/fuzz.sh $(FUZZTIME) $(FUZZ_TARGETS)

## bench: the SPEC §5 speed figures over gRPC beside a bare echo, a 10 s load run, and a PASS/FAIL summary
# Every benchmark prints its bars as "BAR PASS|FAIL name figure limit" lines; the summary
# at the end gathers them and fails when one is missed. The figures are for this machine
# at its current load: run it on a quiet one.
BENCH_LOG ?= $(CURDIR)/.bench.log
# Rounds of the tracing-overhead benchmarks: 100 take ~2 min and their p99 figures have a
# 95 % interval of about ±5 points; 600 take ~10 min and about ±2 (docs/tracing-overhead.md).
TRACE_ROUNDS ?= 100
bench:
	@set -o pipefail; : > $(BENCH_LOG); cd cmd/quarry && \
	go test -run '^$$' -bench 'SpeedBars|LLMOverhead' -benchtime 3000x -timeout 30m . | tee -a $(BENCH_LOG) && \
	go test -run '^$$' -bench TracingOverhead -benchtime 300x -timeout 60m . -trace-rounds $(TRACE_ROUNDS) | tee -a $(BENCH_LOG) && \
	go test -run '^$$' -bench ColdAndWarmStart -benchtime 1x -timeout 10m . | tee -a $(BENCH_LOG) && \
	go run . bench -c 64 -d 10s -warmup 2s | tee -a $(BENCH_LOG)
	@echo; echo "SPEC §5 speed bars (this run):"; grep '^BAR ' $(BENCH_LOG) | sed 's/^BAR //'; \
	! grep -q '^BAR FAIL' $(BENCH_LOG) || { echo "bench: a bar was missed (see above)"; exit 1; }

## tools: install pinned buf and protoc plugins into .tools/bin (cached between runs)
tools: $(TOOLS_DIR)/buf $(TOOLS_DIR)/protoc-gen-go $(TOOLS_DIR)/protoc-gen-go-grpc

# Each tool depends on a stamp named for its pinned version, so a new pin reinstalls a
# tool that .tools/bin already holds (else gen/ would be checked with the old one).
$(TOOLS_DIR)/.version-%:
	@mkdir -p $(TOOLS_DIR); rm -f $(TOOLS_DIR)/.version-$(firstword $(subst @, ,$*))@*; touch $@

$(TOOLS_DIR)/buf: $(TOOLS_DIR)/.version-buf@$(BUF_VERSION)
	@echo "installing buf $(BUF_VERSION) (a few minutes on a cold machine)"
	GOBIN=$(TOOLS_DIR) go install github.com/bufbuild/buf/cmd/buf@$(BUF_VERSION)
	@touch $@
$(TOOLS_DIR)/staticcheck: $(TOOLS_DIR)/.version-staticcheck@$(STATICCHECK_VERSION)
	GOBIN=$(TOOLS_DIR) go install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
	@touch $@
$(TOOLS_DIR)/protoc-gen-go: $(TOOLS_DIR)/.version-protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
	GOBIN=$(TOOLS_DIR) go install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
	@touch $@
$(TOOLS_DIR)/protoc-gen-go-grpc: $(TOOLS_DIR)/.version-protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)
	GOBIN=$(TOOLS_DIR) go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)
	@touch $@
