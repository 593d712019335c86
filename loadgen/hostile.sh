#!/usr/bin/env bash
# make hostile: the hostile scenarios of `rally serve` with its default
# settings (but for HTTP/2 without TLS and history on the adversary's
# topic and reconnect-old's, for h2-slow-read, reconnect-old and the
# adversary), one after the other, on loopback.
# Takes a few minutes.
#
#   HOSTILE_DURATION  how long each attack is held (default 20s)
#   HOSTILE_SETTLE    how long after it the memory is read again (default 30s)
#   HOSTILE_LIMIT     --memory-limit of the server (default: none given, so
#                     rally serve's own, a quarter of the machine's memory)
#   HOSTILE_FLAGS     more flags for rally serve (--event-loop=false for
#                     goroutine mode)
#   HOSTILE_SEED      the adversary's seed (default 1)
#   HOSTILE_OUT       where the JSON results and the server's log go
#                     (default hostile-results/)
#   HOSTILE_LIMIT_ROW the --memory-limit of a second server, started after
#                     the first when HOSTILE_LIMIT is not given, against
#                     which partial and h2-partial at /echo's limit run again and its
#                     peak RSS must stay under that limit (default 512MiB;
#                     none: no second server)
#
# Each scenario prints its verdict line and figures; the exit status is
# 1 if any scenario failed (0 if none did).
set -uo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
duration=${HOSTILE_DURATION:-20s}
settle=${HOSTILE_SETTLE:-30s}
limit=${HOSTILE_LIMIT:-}
flags=()
if [ -n "$limit" ]; then
	flags+=(--memory-limit "$limit")
fi
# shellcheck disable=SC2206 # HOSTILE_FLAGS is a list of flags
flags+=(${HOSTILE_FLAGS:-})
out=${HOSTILE_OUT:-hostile-results}
mkdir -p "$out"
bin=$(mktemp -d)/rally
$GO build -o "$bin" ./cmd/rally || exit 1
# The server and the attacker each hold up to --conns descriptors.
ulimit -n "$(ulimit -Hn)" 2>/dev/null

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' 2>/dev/null || echo 18790)
pid=
stop_server() {
	if [ -n "$pid" ]; then
		kill "$pid" 2>/dev/null
		wait "$pid" 2>/dev/null
	fi
	pid=
}
trap stop_server EXIT
# start_server LOG FLAGS...: rally serve on $port, its pid in $pid.
start_server() {
	local log=$1
	shift
	"$bin" serve --addr "127.0.0.1:$port" "$@" --h2c --history adversary,hostile-history --history-size 1000 --log-level warn 2>"$log" >/dev/null &
	pid=$!
	for _ in $(seq 100); do
		(exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
		sleep 0.1
	done
}

status=0
run() {
	local name=$1 scenario=$2 path=$3
	shift 3
	"$bin" bench "$scenario" "ws://127.0.0.1:$port$path" --server-pid "$pid" \
		--duration "$duration" --settle "$settle" --json-file "$out/$name.json" "$@" || status=1
	echo
}

start_server "$out/serve.log" "${flags[@]}"
run slowloris slowloris /echo
run head-hold head-hold /echo
run partial partial /echo
# Messages one byte short of /echo's limit (1 MiB): they fit, and each is
# gathered, as the defaults allow (assembly may take half the memory
# limit, itself a quarter of the machine's memory). The 1,000 clients
# send 1,000 MiB; the bound is that and half as much again. Held to the
# limit itself: the second server below.
at_limit=(--size 1048575)
if [ -z "$limit" ]; then
	at_limit+=(--max-rss 1600MB)
fi
run partial-echo-limit partial /echo "${at_limit[@]}"
# The same over HTTP/2 (h2c): 1,000 streams, 100 to a connection.
run h2-partial-echo-limit h2-partial /echo "${at_limit[@]}"
run slow-read slow-read /ws
run h2-slow-read h2-slow-read /ws
run garbage garbage /echo
run ping-flood ping-flood /echo
run many-subs many-subs /ws
run reconnect-old reconnect-old /ws
run bomb bomb /echo
run adversary adversary /ws --seed "${HOSTILE_SEED:-1}"
echo "rally serve${flags[*]:+ ${flags[*]}}: results in $out/, its log in $out/serve.log"

row=${HOSTILE_LIMIT_ROW:-512MiB}
if [ -z "$limit" ] && [ "$row" != none ]; then
	stop_server
	echo
	start_server "$out/serve-limit.log" --memory-limit "$row" "${flags[@]}"
	run partial-echo-limit-memory-limit partial /echo --size 1048575 --max-rss "$row"
	run h2-partial-echo-limit-memory-limit h2-partial /echo --size 1048575 --max-rss "$row"
	echo "rally serve --memory-limit $row${flags[*]:+ ${flags[*]}}: partial and h2-partial at /echo's limit, its log in $out/serve-limit.log"
fi
exit $status
