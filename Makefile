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

stripemock: ## the checks against Stripe's stripe-mock (installed once by scripts/test.sh) on both stores
	./scripts/test.sh ./providers/stripe/ -run StripeMock -v

demo: ## run the job against the fake Stripe and a throwaway PostgreSQL
	./scripts/demo.sh

lint: ## gofmt, go vet, staticcheck
	test -z "$$(gofmt -l $$(git ls-files '*.go'))"
	go vet ./...
	go run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...

image: ## build the container image (needs a Docker engine)
	docker build --build-arg VERSION=$(VERSION) -t reconciler:$(VERSION) .

bench: ## benchmarks of DESIGN section 9: the built binary at 10k, 100k and 1M events, and under a rate limit (about 10 minutes)
	./scripts/test.sh ./bench/ -run '^$$' -bench . -benchtime 1x -count 3 -timeout 60m
	./scripts/test.sh ./reconcile/ -run '^$$' -bench BenchmarkRun -benchtime 3x

ci: ## what CI runs
	bash .ci/run

.PHONY: help build image test stripemock demo lint bench ci
