#!/usr/bin/env bash
# test-arches.sh runs the contract, model and event-loop tests of the root
# package on the architectures test-qemu.sh does not cover: 386 natively
# on an amd64 machine (no -race there), riscv64, ppc64le, s390x (big
# endian) and loong64 under qemu-user (Debian's qemu-user). It takes longer
# than test-qemu.sh, so make test does not run it: `make test-arches`.
# A platform that cannot run here is skipped with one line saying why.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

GO="${GO:-go}"
checks="${QEMU_RAPID_CHECKS:-30}"
run="^($(grep -ho '^func Test[A-Za-z0-9_]*' contract_test.go loop_test.go model_test.go | sed 's/^func //' | paste -sd'|'))\$"
failed=0

bin386="$(mktemp -d)/rally-386.test"
if [ "$("$GO" env GOHOSTARCH)" != amd64 ]; then
	echo "test-arches.sh: skip 386: runs natively only on amd64 (qemu-i386 crashes the Go runtime: morestack on g0)"
elif ! GOARCH=386 "$GO" test -c -o "$bin386" . || ! "$bin386" -test.run '^$' >/dev/null 2>&1; then
	echo "test-arches.sh: skip 386: this kernel does not run 32-bit x86 binaries (no IA32 emulation), and qemu-i386 crashes the Go runtime (morestack on g0)"
else
	echo "== GOARCH=386 natively"
	"$bin386" -test.count=1 -test.timeout 10m -test.run "$run" -rapid.checks="$checks" || failed=1
fi
rm -rf "$(dirname "$bin386")"

for target in riscv64:qemu-riscv64 ppc64le:qemu-ppc64le s390x:qemu-s390x loong64:qemu-loongarch64; do
	arch="${target%%:*}" emu="${target##*:}"
	if ! command -v "$emu" >/dev/null; then
		echo "test-arches.sh: skip $arch: $emu missing (Debian's qemu-user: bash interop/setup.sh)"
		continue
	fi
	echo "== GOARCH=$arch under $emu"
	GOARCH="$arch" RALLY_TEST_EMULATOR="$emu" "$GO" test -exec "$emu" -count=1 -timeout 15m -run "$run" . -rapid.checks="$checks" || failed=1
done
exit $failed
