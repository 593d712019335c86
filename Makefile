# rally — make targets
#
#   make check   the quick loop while editing: vet and unit tests (with -race),
#                no external peers (packages that need node, Chromium or
#                Python are left out or skip under -short)
#   make test    everything: installs the peers the tests need (npm packages,
#                Debian's chromium, python3-websockets and the proxies:
#                tinyproxy, stunnel4, dante-server, microsocks), then runs
#                every test with -race. This is what CI runs.
#   make test-loaded  make check three times in a row beside two busy
#                processes per core, each run's time and result printed
#                (scripts/test-loaded.sh; LOADED_CMD="make test" for the rest)
#   make bench   the side-by-side benchmarks against other libraries
#   make hostile the hostile scenarios of `rally bench` against `rally serve
#                --memory-limit 512MiB` (a few minutes; docs/SERVE.md "Under attack")
#   make hold100k  100,000 idle WebSockets on rally serve processes sharing a
#                port, a broadcast to all of them (scripts/hold-100k.sh; a few
#                minutes; HOLD100K_FLAGS=--event-loop for the event loops)
#   make fuzz    every fuzz target of the module for FUZZTIME each (default 1m);
#                findings land in the package's testdata/fuzz

GO      ?= go
PKGS    := ./...
UNIT    := $(shell $(GO) list ./... 2>/dev/null | grep -v '/interop')

.PHONY: check test test-loaded setup bench fmt hostile fuzz hold100k

check:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) vet $(PKGS)
	$(GO) test -race -short -count=1 $(UNIT)
	$(GO) test -tags purego -count=1 ./frame/
	$(GO) test -count=1 -run 'Allocates' ./pubsub/ ./server/ # allocation counts skip under -race

setup:
	bash interop/setup.sh

test: setup
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) vet $(PKGS)
	$(GO) test -race -count=1 -timeout 12m $(PKGS)
	RALLY_TEST_EVENT_LOOP=1 $(GO) test -race -short -count=1 . # every root Server test again, on event loops
	$(GO) test -tags purego -count=1 ./frame/
	$(GO) test -count=1 -run 'Allocates' ./pubsub/ ./server/ # allocation counts skip under -race

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
