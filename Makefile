# Waybill. `make help` lists the targets.
GO ?= go

.PHONY: help run test fuzz bench lint fmt tidy

# FUZZTIME is how long `make fuzz` runs each fuzz target: a count of
# inputs (1000000x) or a duration (5m). Go 1.26's fuzzer may fail a target
# whose duration ends mid-input with a bare "context deadline exceeded"
# (go.dev/issue/75804); a count has no deadline, so the defaults are counts.
FUZZTIME ?= 1000000x

help: ## list the targets
	@grep -E '^[a-z]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-8s %s\n", $$1, $$2}'

run: ## build and run the service with embedded PostgreSQL and NATS (data in ./var); ARGS='--listen :9090' adds flags
	$(GO) build -o bin/waybill ./cmd/waybill
	exec ./bin/waybill serve $(ARGS)

test: ## every test, with the race detector, against a real PostgreSQL; then each fuzz target for 5,000 inputs
	$(GO) test -race -count=1 -timeout 15m ./...
	@cache=$$(mktemp -d); trap 'rm -rf "$$cache"' EXIT; $(MAKE) --no-print-directory fuzz FUZZTIME=5000x FUZZCACHE="$$cache"

# fuzz finds every fuzz target (func FuzzX in a _test.go file), builds each
# package's test binary once, with the fuzzer's instrumentation, all at
# once (a build spends much of its time linking, on one core), and runs
# each target on its own, as fuzzing requires. FUZZCACHE is where the
# inputs found are kept: go test's own cache by default; make test gives
# a fresh one, so its few seconds go to fuzzing, not to replaying all
# that long runs found.
FUZZCACHE ?= $(shell $(GO) env GOCACHE)/fuzz/$(shell $(GO) list -m)
fuzz: ## each fuzz target for FUZZTIME (default 1000000x, or a duration such as 5m); docs/fuzzing.md
	@set -e; bin=$$(mktemp -d); trap 'rm -rf "$$bin"' EXIT; \
	pkgs=$$(grep -rl --include='*_test.go' --exclude-dir=var --exclude-dir=bin --exclude-dir=testdata '^func Fuzz' . | xargs -n1 dirname | sort -u); \
	pids=; for pkg in $$pkgs; do \
		$(GO) test -c -fuzz . -o "$$bin/$$(echo $${pkg#./} | tr / -).test" $$pkg & pids="$$pids $$!"; \
	done; \
	for pid in $$pids; do wait $$pid; done; \
	for pkg in $$pkgs; do \
		for target in $$(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' $$pkg/*_test.go); do \
			echo "fuzz $$pkg $$target for $(FUZZTIME)"; \
			(cd $$pkg && "$$bin/$$(echo $${pkg#./} | tr / -).test" -test.run '^$$' -test.fuzz "^$$target\$$" -test.fuzztime $(FUZZTIME) \
				-test.fuzzcachedir "$(FUZZCACHE)/$${pkg#./}"); \
		done; \
	done

bench: ## the benchmarks; figures go in docs/performance.md
	$(GO) test -run '^$$' -bench . -benchmem -timeout 60m ./...

lint: ## go vet and staticcheck (pinned by the tool directive in go.mod)
	$(GO) vet ./...
	$(GO) tool staticcheck ./...

fmt: ## check that gofmt would change nothing
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

tidy: ## check that go.mod and go.sum are tidy
	$(GO) mod tidy -diff
