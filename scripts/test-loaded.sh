#!/usr/bin/env bash
# Run the tests while the machine is busy, as a contributor's laptop or a
# shared CI runner is: two busy processes per core spin for the whole run
# (stopped on exit, whatever happens), and the command runs RUNS times in a
# row. Each run's time and result are printed, with the load average seen;
# the script fails if any run failed. The tests must pass here: a test that
# only passes on an idle machine asserts a time, not a behaviour.
#
# Usage: scripts/test-loaded.sh [command...]     (default: make check)
# Settings (environment): RUNS (3), SPIN_PER_CORE (2).
set -uo pipefail

RUNS=${RUNS:-3}
SPIN_PER_CORE=${SPIN_PER_CORE:-2}
if [ $# -eq 0 ]; then
	set -- make check
fi
cores=$(getconf _NPROCESSORS_ONLN 2>/dev/null || nproc)
spinners=()
stop() {
	for pid in "${spinners[@]}"; do
		kill "$pid" 2>/dev/null
	done
	wait "${spinners[@]}" 2>/dev/null
}
trap stop EXIT
trap 'exit 130' INT TERM
for _ in $(seq $((cores * SPIN_PER_CORE))); do
	yes >/dev/null &
	spinners+=($!)
done
echo "test-loaded: ${#spinners[@]} busy processes on $cores cores; $RUNS runs of: $*"

loadavg() { cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || uptime | sed 's/.*load averages*: //'; }
failed=0
summary=()
for run in $(seq "$RUNS"); do
	echo "== run $run of $RUNS (load average $(loadavg))"
	start=$(date +%s)
	"$@"
	rc=$?
	secs=$(($(date +%s) - start))
	result=ok
	if [ $rc -ne 0 ]; then
		result="FAILED (exit $rc)"
		failed=1
	fi
	summary+=("run $run: $result in ${secs}s, load average after: $(loadavg)")
	echo "== ${summary[-1]}"
done
echo "test-loaded summary:"
printf '  %s\n' "${summary[@]}"
exit $failed
