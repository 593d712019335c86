#!/usr/bin/env bash
# test-qemu.sh cross-compiles the root package's tests for arm64 and for
# 32-bit arm (GOARM=7) and runs the contract, model and event-loop tests,
# and the frame package's tests, under qemu-user (Debian's qemu-user,
# installed by interop/setup.sh): goroutine identity, the event loop's
# epoll and the 32-bit layout are checked on other architectures than the
# build machine's. 386 is not the 32-bit target: the Go runtime crashes
# under qemu-i386 ("morestack on g0").
# The model test runs fewer sequences under emulation (QEMU_RAPID_CHECKS).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

GO="${GO:-go}"
checks="${QEMU_RAPID_CHECKS:-30}"
# Every test of contract_test.go, loop_test.go and model_test.go.
run="^($(grep -ho '^func Test[A-Za-z0-9_]*' contract_test.go loop_test.go model_test.go | sed 's/^func //' | paste -sd'|'))\$"

for target in arm64:qemu-aarch64 arm:qemu-arm; do
	arch="${target%%:*}" emu="${target##*:}"
	command -v "$emu" >/dev/null || { echo "test-qemu.sh: $emu missing (bash interop/setup.sh)" >&2; exit 1; }
	echo "== GOARCH=$arch under $emu"
	# RALLY_TEST_EMULATOR: a test that runs its own binary again starts
	# it through the emulator too.
	export GOARCH="$arch" GOARM=7 RALLY_TEST_EMULATOR="$emu"
	"$GO" test -exec "$emu" -count=1 -timeout 10m -run "$run" . -rapid.checks="$checks"
	"$GO" test -exec "$emu" -count=1 -timeout 5m ./frame/
done
