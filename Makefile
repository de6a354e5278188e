# Waybill. `make help` lists the targets.
GO ?= go

.PHONY: help run test bench lint fmt tidy

help: ## list the targets
	@grep -E '^[a-z]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-8s %s\n", $$1, $$2}'

run: ## build and run the service with embedded PostgreSQL and NATS (data in ./var); ARGS='--listen :9090' adds flags
	$(GO) build -o bin/waybill ./cmd/waybill
	exec ./bin/waybill serve $(ARGS)

test: ## every test, with the race detector, against a real PostgreSQL
	$(GO) test -race -count=1 -timeout 15m ./...

bench: ## the benchmarks; figures go in docs/performance.md
	$(GO) test -run '^$$' -bench . -benchmem -timeout 60m ./...

lint: ## go vet and staticcheck (pinned by the tool directive in go.mod)
	$(GO) vet ./...
	$(GO) tool staticcheck ./...

fmt: ## check that gofmt would change nothing
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

tidy: ## check that go.mod and go.sum are tidy
	$(GO) mod tidy -diff
