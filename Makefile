# allot — make help lists the targets.
SHELL := /bin/bash
GO    ?= go
PKGS  ?= ./...
BIN   := bin/allot
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X main.version=$(VERSION)
GOBIN := $(shell $(GO) env GOPATH)/bin
GOLANGCI_LINT_VERSION := v2.15.0
BENCHTIME ?= 2s
BENCHCOUNT ?= 6
FUZZTIME ?= 20s
# The repository's Go modules that make lint and make verify cover: allot
# itself; e2e and deploy/images, their own modules so that allot's go.mod
# never carries testcontainers and the Docker client; internal/clientonly,
# an application importing only the client (make check-client-deps).
# bench/peers and deploy/deploycheck have their own targets.
MODULES := . e2e deploy/images internal/clientonly

.DEFAULT_GOAL := help

.PHONY: help
help: ## list the targets
	@awk 'BEGIN{FS=":.*## "} /^[a-zA-Z_-]+:.*## /{printf "  %-12s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: build
build: ## build bin/allot (static)
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/allot

.PHONY: test
test: ## run every test against real redis-server (needs redis-server on PATH)
	@command -v redis-server >/dev/null || { echo "make test: redis-server not found; install it (apt-get install -y redis-server) or run .ci/run" >&2; exit 1; }
	@command -v nginx >/dev/null && command -v caddy >/dev/null || { echo "make test: nginx or caddy not found (deploy/proxies runs both); install them (apt-get install -y nginx caddy) or run .ci/run" >&2; exit 1; }
	$(GO) vet $(PKGS)
	cd deploy/images && $(GO) vet ./...
	cd e2e && $(GO) vet ./...
	$(GO) test -race -count=1 -timeout 15m $$($(GO) list $(PKGS) | grep -v -e /shares/protocheck)
	cd deploy/images && $(GO) test -race -count=1 -timeout 5m ./...
	@# The e2e short suite measures utilisation: alone, and without -race in
	@# its load generator, so that the other packages' tests do not starve it.
	cd e2e && $(GO) test -count=1 -timeout 10m .
	$(GO) test -count=1 -timeout 5m ./shares/protocheck -run TestProtocol -seeds 2000 -v
	$(MAKE) --no-print-directory test-envoy-compat

.PHONY: test-envoy-compat
test-envoy-compat: ## allot envoy-ratelimit vs envoyproxy/ratelimit (pinned), request by request, real processes on redis-server (first run installs the original, ~1 min)
	cd bench/peers && GOFLAGS=-mod=mod $(GO) test -count=1 -timeout 15m ./envoydiff

SEEDS ?= 100000
.PHONY: check-protocol
check-protocol: ## run the protocol checker over SEEDS seeds (default 100000); prints the shortest failing trace
	$(GO) test -count=1 -timeout 0 ./shares/protocheck -run TestProtocol -seeds $(SEEDS) -v

.PHONY: bench
bench: ## run the Go benchmarks (BENCHCOUNT runs each; compare with benchstat)
	$(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) -count $(BENCHCOUNT) $(PKGS) | tee bench.txt

.PHONY: bench-peers
bench-peers: ## allot end to end vs redis-benchmark, Envoy ratelimit, redis_rate, gubernator in one run (~10 min; ARGS=--quick ~1.5 min); writes bench/results/peers/
	cd bench/peers && GOFLAGS=-mod=mod $(GO) run ./cmd/benchpeers $(ARGS)

.PHONY: fuzz
fuzz: ## run every fuzz target for FUZZTIME each
	@set -e; for pkg in $$($(GO) list $(PKGS)); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz' || true); do \
	    echo "== $$pkg $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg; \
	  done; done

.PHONY: sim
sim: build ## run every simulator scenario and print the table
	$(BIN) sim

.PHONY: images
images: ## build the e2e images offline (allot, allot-etcd, allot-redis; skipped when the tag for the current content exists)
	cd deploy/images && $(GO) run ./build

.PHONY: e2e
e2e: images ## run the full e2e suite on real containers (Docker; every scenario, 3 etcd, 2 coordinators); writes e2e/out/report.md and plots
	cd e2e && $(GO) test -p 1 -count=1 -tags e2e -timeout 40m -v ./...

.PHONY: lint
lint: ## golangci-lint with .golangci.yml over every module in MODULES, bench/peers and deploy/deploycheck (installs the pinned version if missing)
	@test -x $(GOBIN)/golangci-lint || $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)
	$(GOBIN)/golangci-lint run $(PKGS)
	@# The nested modules: each is linted from its own directory (golangci-lint
	@# finds .golangci.yml above it); e2e with its full suite's tag too.
	cd e2e && $(GOBIN)/golangci-lint run --build-tags e2e ./...
	cd deploy/images && $(GOBIN)/golangci-lint run ./...
	cd internal/clientonly && $(GOBIN)/golangci-lint run ./...
	@# The tools' modules (not in MODULES: they are tidied by their own
	@# targets); bench/peers resolves its peers as make bench-peers does.
	cd bench/peers && GOFLAGS=-mod=mod $(GOBIN)/golangci-lint run ./...
	cd deploy/deploycheck && $(GOBIN)/golangci-lint run ./...

.PHONY: verify
verify: ## go mod tidy (every module in MODULES), gofmt and make proto leave no diff; a client-only module pulls no Docker
	@set -e; for m in $(MODULES); do echo "go mod tidy ($$m)"; (cd $$m && $(GO) mod tidy); done
	@# Unformatted files to stderr (not tee /dev/stderr: that reopens, and
	@# truncates, a log file stderr is redirected to).
	@out=$$(gofmt -l . | grep -v '\.pb\.go$$'); if [ -n "$$out" ]; then echo "gofmt: not formatted:" >&2; echo "$$out" >&2; exit 1; fi
	git diff --exit-code $(foreach m,$(MODULES),$(m)/go.mod $(m)/go.sum)
	@$(MAKE) --no-print-directory check-client-deps
	@# The generated code must be what the .proto files and the pinned
	@# plugins (.ci/run installs them) produce.
	$(MAKE) --no-print-directory proto
	@git diff --exit-code -- 'proto/*.pb.go' && test -z "$$(git status --porcelain -- 'proto/*.pb.go')" || { echo "verify: make proto changed proto/ (see above): commit the regenerated code, or install protoc-gen-go and protoc-gen-go-grpc at the versions in .ci/run" >&2; git status --short -- 'proto/*.pb.go' >&2; exit 1; }

# Module paths no application importing only github.com/allot-dev/allot/client
# may require (an extended regular expression).
CLIENT_DENY := testcontainers|moby|docker|containerd

.PHONY: check-client-deps
check-client-deps: ## a module importing only allot's client (internal/clientonly) has no testcontainers, moby, Docker or containerd module in its graph
	@# Its own go.mod, or the graph listed would be allot's.
	@self=$$(cd internal/clientonly && $(GO) list -m) && [ "$$self" = github.com/allot-dev/allot/internal/clientonly ] \
	  || { echo "check-client-deps: internal/clientonly is not the module github.com/allot-dev/allot/internal/clientonly (go.mod missing?)" >&2; exit 1; }; \
	mods=$$(cd internal/clientonly && $(GO) list -m all) || { echo "check-client-deps: go list -m all in internal/clientonly failed" >&2; exit 1; }; \
	bad=$$(grep -E '$(CLIENT_DENY)' <<<"$$mods" || true); \
	if [ -n "$$bad" ]; then \
	  echo "check-client-deps: FAIL: a module importing only github.com/allot-dev/allot/client requires these modules (matching $(CLIENT_DENY)):" >&2; \
	  sed 's/^/  /' <<<"$$bad" >&2; \
	  echo "(go mod why -m MODULE, in internal/clientonly, says which import brings each)" >&2; \
	  exit 1; \
	fi; \
	echo "check-client-deps: ok ($$(wc -l <<<"$$mods") modules in internal/clientonly's graph, none matching $(CLIENT_DENY))"

.PHONY: demo
demo: build ## run allot dev --traffic: etcd, a coordinator, three regions and live demo traffic (Ctrl-C stops)
	$(BIN) dev --traffic

.PHONY: deploy-check
deploy-check: ## check deploy/: helm lint/template (strict API types, flags vs --help), promtool rules + tests, dashboard metrics vs code, compose config, example policy
	deploy/check.sh

.PHONY: clean
clean: ## remove build outputs
	rm -rf bin bench.txt

.PHONY: proto
proto: ## regenerate proto/ Go code (needs protoc, protoc-gen-go, protoc-gen-go-grpc)
	PATH="$(GOBIN):$$PATH" protoc -I proto --go_out=proto --go_opt=paths=source_relative \
	  --go-grpc_out=proto --go-grpc_opt=paths=source_relative proto/allot/v1/*.proto
