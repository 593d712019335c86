# rally — make targets
#
#   make check   the quick loop while editing: vet and unit tests (with -race),
#                no external peers (packages that need node, Chromium or
#                Python are left out or skip under -short)
#   make test    everything: installs the peers the tests need (npm packages,
#                Debian's chromium, python3-websockets and the proxies:
#                tinyproxy, stunnel4, dante-server, microsocks), then runs
#                every test with -race, then test-qemu. This is what CI runs.
#   make test-qemu  the cork and loop tests without assembly goroutine identity
#                (-tags rally_nogid), and the contract, model and event-loop
#                tests on arm64 and arm under qemu-user (scripts/test-qemu.sh)
#   make test-arches  the contract, model and event-loop tests on 386
#                (natively) and riscv64, ppc64le, s390x, loong64 under qemu-user
#                (scripts/test-arches.sh; longer than test-qemu, so not in test)
#   make test-loaded  make check three times in a row beside two busy
#                processes per core, each run's time and result printed
#                (scripts/test-loaded.sh; LOADED_CMD="make test" for the rest)
#   make bench   the side-by-side benchmarks against other libraries
#   make hostile the hostile scenarios of `rally bench` against `rally serve`
#                with its defaults (about 12 minutes; docs/SERVE.md "Under attack";
#                HOSTILE_LIMIT=512MiB for a memory limit, HOSTILE_FLAGS=--event-loop=false)
#   make hold100k  100,000 idle WebSockets on rally serve processes sharing a
#                port, a broadcast to all of them (scripts/hold-100k.sh; a few
#                minutes; HOLD100K_FLAGS=--event-loop=false for a goroutine each)
#   make hold1m  1,000,000 idle WebSockets on this machine and a 16 B
#                broadcast to all (scripts/hold-1m.sh: about 60 server and 60
#                client processes, raises tcp_mem as root for the run; some
#                15 GB of memory and ten minutes; not part of test)
#   make release cross-compiles rally for linux, darwin and windows on amd64
#                and arm64 into dist/, version and commit stamped in, with
#                SHA-256 checksums (dist/SHA256SUMS); VERSION=v1.2.3 to name it
#   make fuzz    every fuzz target of the module for FUZZTIME each (default 1m);
#                findings land in the package's testdata/fuzz

GO      ?= go
PKGS    := ./...
UNIT    := $(shell $(GO) list ./... 2>/dev/null | grep -v '/interop')

# The bound on each test binary's run (go test -timeout), met by a busy
# machine (see test-loaded). A package that hits it panics with the names
# of the tests still running ("running tests:") and every goroutine's stack.
CHECK_TIMEOUT ?= 40m
TEST_TIMEOUT  ?= 60m

.PHONY: check test test-qemu test-arches test-loaded setup bench fmt hostile fuzz hold100k hold1m release

check:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) vet $(PKGS)
	GOARCH=386 $(GO) vet $(PKGS) # every package builds where an int is 32 bits
	$(GO) test -race -short -count=1 -timeout $(CHECK_TIMEOUT) $(UNIT)
	$(GO) test -tags purego -count=1 -timeout $(CHECK_TIMEOUT) ./frame/
	$(GO) test -count=1 -timeout $(CHECK_TIMEOUT) -run 'Allocates' ./pubsub/ ./server/ # allocation counts skip under -race

setup:
	bash interop/setup.sh

test: setup
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) vet $(PKGS)
	GOARCH=386 $(GO) vet $(PKGS) # every package builds where an int is 32 bits
	$(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) $(PKGS)
	RALLY_TEST_EVENT_LOOP=1 $(GO) test -race -short -count=1 -timeout $(CHECK_TIMEOUT) . # every root Server test again, on event loops
	$(GO) test -tags purego -count=1 -timeout $(CHECK_TIMEOUT) ./frame/
	$(GO) test -count=1 -timeout $(CHECK_TIMEOUT) -run 'Allocates' ./pubsub/ ./server/ # allocation counts skip under -race
	$(MAKE) test-qemu

# Goroutine identity without assembly (-tags rally_nogid), then the contract,
# model and event-loop tests on arm64 and 32-bit arm under qemu-user
# (scripts/test-qemu.sh).
test-qemu:
	$(GO) test -race -count=1 -timeout $(CHECK_TIMEOUT) -tags rally_nogid -run 'CurrentG|Cork|EventLoopTurn|EventLoopWrite' .
	bash scripts/test-qemu.sh

# The same tests on the other architectures Go supports on Linux
# (scripts/test-arches.sh); each skipped one says why.
test-arches:
	bash scripts/test-arches.sh

LOADED_CMD ?= $(MAKE) check

# The tests must pass on a busy machine: see scripts/test-loaded.sh.
test-loaded:
	bash scripts/test-loaded.sh $(LOADED_CMD)

# The side-by-side comparison (about 7 minutes here); rewrites the peers
# section of docs/BENCHMARKS.md. Installs the Node peers (npm ws, Bun) first.
bench:
	cd bench/node && npm ci --no-audit --no-fund
	cd bench && $(GO) run ./cmd/runner

fmt:
	gofmt -w $$(git ls-files '*.go')

hostile:
	bash loadgen/hostile.sh

hold100k:
	bash scripts/hold-100k.sh $(HOLD100K_FLAGS)

hold1m:
	bash scripts/hold-1m.sh $(HOLD1M_FLAGS)

FUZZTIME ?= 1m

# Every Fuzz function of every package of the main module, one after the
# other; a failing input is written to testdata/fuzz/FuzzName/ of its
# package (commit it: it becomes a seed that `go test` replays).
fuzz:
	@set -e; for pkg in $$($(GO) list ./...); do \
		for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz' || true); do \
			echo "== $$pkg $$f ($(FUZZTIME))"; \
			$(GO) test -run '^$$' -fuzz "^$$f\$$" -fuzztime $(FUZZTIME) $$pkg; \
		done; \
	done

VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT    := $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
PLATFORMS := linux/amd64 linux/arm64 darwin/amd64 darwin/arm64 windows/amd64 windows/arm64

# Static binaries (CGO_ENABLED=0), one per platform, named
# rally-VERSION-OS-ARCH[.exe], and their SHA-256 sums.
release:
	rm -rf dist && mkdir -p dist
	@set -e; for p in $(PLATFORMS); do \
		os=$${p%/*}; arch=$${p#*/}; ext=; [ $$os = windows ] && ext=.exe; \
		out=dist/rally-$(VERSION)-$$os-$$arch$$ext; echo "== $$out"; \
		CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch $(GO) build -trimpath \
			-ldflags "-s -w -X main.stampVersion=$(VERSION) -X main.stampCommit=$(COMMIT)" \
			-o $$out ./cmd/rally; \
	done
	cd dist && sha256sum rally-* > SHA256SUMS && cat SHA256SUMS
