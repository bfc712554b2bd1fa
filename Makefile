# Run `make help` for the targets.
.DEFAULT_GOAL := help
BIN := bin/reconciler
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)

help: ## show this help
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-10s %s\n", $$1, $$2}'

build: ## build the static binary into bin/ (the command the Dockerfile runs)
	VERSION=$(VERSION) scripts/build.sh $(BIN)

test: ## run every test against a throwaway PostgreSQL (or $$DATABASE_URL)
	./scripts/test.sh

test-mapped: ## the scenario and store suites again on an application schema of its own (issue 18: other table, column and state names)
	RECONCILER_TEST_SCHEMA=mapped ./scripts/test.sh ./internal/scenario/ ./store/...

stripemock: ## the checks against Stripe's stripe-mock (installed once by scripts/test.sh) on both stores
	./scripts/test.sh ./providers/stripe/ -run StripeMock -v

demo: ## run the job against the fake Stripe and a throwaway PostgreSQL
	./scripts/demo.sh

dashboard: ## render docs/examples/dashboard.png: the Grafana dashboard over real metrics of serve (about 14 minutes; installs prometheus and chromium as root)
	./scripts/dashboard-screenshot.sh

lint: ## gofmt, go vet, staticcheck
	test -z "$$(gofmt -l $$(git ls-files '*.go'))"
	go vet ./...
	go run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...

image: ## build the container image (needs a Docker engine)
	docker build --build-arg VERSION=$(VERSION) -t reconciler:$(VERSION) .

# make bench runs on the durability users run: postgres takes the last -c
# of a name, so these override scripts/pg.sh's throwaway fsync=off.
DURABLE := -c fsync=on -c synchronous_commit=on -c full_page_writes=on
BENCH_OUT ?= bench.out

bench: ## every target of DESIGN section 9 with its measured figure, on PostgreSQL with fsync on (about 45 minutes; output in bench.out)
	PG_EXTRA_OPTS="$(DURABLE)" ./scripts/test.sh ./bench/ -run '^$$' -bench 'Month|Accounts|EndToEnd|RateLimited|VerifyAll' -benchtime 1x -count 3 -timeout 120m | tee $(BENCH_OUT)
	PG_EXTRA_OPTS="$(DURABLE)" ./scripts/test.sh ./bench/ -run '^$$' -bench 'Peer' -benchtime 1x -count 1 -timeout 60m | tee -a $(BENCH_OUT)
	./scripts/test.sh ./internal/demo/ -run '^$$' -bench 'Demo' -benchtime 1x -count 3 -timeout 30m | tee -a $(BENCH_OUT)
	PG_EXTRA_OPTS="$(DURABLE)" ./scripts/test.sh ./reconcile/ -run '^$$' -bench BenchmarkRun -benchtime 3x | tee -a $(BENCH_OUT)
	go run ./bench/summary < $(BENCH_OUT)

ci: ## what CI runs
	bash .ci/run

.PHONY: help build image test test-mapped stripemock demo dashboard lint bench ci
