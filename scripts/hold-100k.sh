#!/usr/bin/env bash
# Hold 100,000 idle WebSocket connections to `rally serve` on this machine,
# with pings flowing, and report the servers' memory per connection, the
# handshake rate and the time a 1 KiB broadcast takes to reach every
# connection. docs/BENCHMARKS.md ("100,000 idle connections") has the
# figures and what they mean. scripts/hold-1m.sh runs it for a million.
#
# A process may hold only so many open files (ulimit -Hn; 20,000 on the
# machine this was written on), so the server runs as SERVERS processes
# sharing one port (rally serve --reuse-port), joined by NATS (the first
# runs it embedded) so that one publish reaches the subscribers of all of
# them; the clients run as CLIENT_PROCS processes (rally bench idle
# --procs) dialling from the SOURCE_ADDRS loopback addresses, each of
# which has its own ephemeral ports.
#
# Usage: scripts/hold-100k.sh [--event-loop | --event-loop=false]
# (rally serve runs its connections on event loops on Linux unless given
# --event-loop=false: a goroutine each)
# Settings (environment): CONNS (100000), SERVERS (6), CLIENT_PROCS (6),
# SOURCE_ADDRS (127.0.0.2-127.0.0.11), PORT (18080), NATS_PORT (14222),
# HOLD (60s), PING_INTERVAL (20s: the servers' and the clients' pings),
# IDLE_TIMEOUT (10m: rally serve --idle-timeout),
# AFTER (30s: memory read again after the close), BROADCAST_SIZE (1024
# bytes), TOPIC (hold100k), RALLY (a rally binary; built from this
# checkout by default), OUT (a directory for the logs and the JSON
# result; a new temporary one by default).
#
# Every process it starts asks the kernel to be the first one killed
# should memory run out (oom_score_adj 1000), not other work on the machine.
set -euo pipefail

CONNS=${CONNS:-100000}
SERVERS=${SERVERS:-6}
CLIENT_PROCS=${CLIENT_PROCS:-6}
SOURCE_ADDRS=${SOURCE_ADDRS:-127.0.0.2-127.0.0.11}
PORT=${PORT:-18080}
NATS_PORT=${NATS_PORT:-14222}
HOLD=${HOLD:-60s}
PING_INTERVAL=${PING_INTERVAL:-20s}
IDLE_TIMEOUT=${IDLE_TIMEOUT:-10m}
AFTER=${AFTER:-30s}
BROADCAST_SIZE=${BROADCAST_SIZE:-1024}
TOPIC=${TOPIC:-hold100k}
OUT=${OUT:-$(mktemp -d /tmp/hold-100k.XXXXXX)}
ENGINE=()
MODE=event-loop
case "${1:-}" in
--event-loop | --event-loop=true) ENGINE=(--event-loop) ;;
--event-loop=false) ENGINE=(--event-loop=false); MODE=goroutines ;;
"") ;;
*) echo "usage: $0 [--event-loop | --event-loop=false]" >&2; exit 2 ;;
esac
echo 1000 >/proc/self/oom_score_adj 2>/dev/null || true

cd "$(dirname "$0")/.."
mkdir -p "$OUT"
if [[ -z "${RALLY:-}" ]]; then
	RALLY="$OUT/rally"
	go build -o "$RALLY" ./cmd/rally
fi

# What the kernel allows, and whether the plan fits in it.
files=$(ulimit -Hn)
ulimit -n "$files"
read -r port_lo port_hi </proc/sys/net/ipv4/ip_local_port_range
ports=$((port_hi - port_lo + 1))
somaxconn=$(cat /proc/sys/net/core/somaxconn)
conntrack=$(cat /proc/sys/net/netfilter/nf_conntrack_max 2>/dev/null || echo none)
echo "kernel: open files per process $files, ephemeral ports per source address $ports," \
	"somaxconn $somaxconn, conntrack max $conntrack, tcp_mem (pages) $(cat /proc/sys/net/ipv4/tcp_mem)"
per_server=$(((CONNS + SERVERS - 1) / SERVERS))
per_client=$(((CONNS + CLIENT_PROCS - 1) / CLIENT_PROCS))
# SO_REUSEPORT spreads by hash, not evenly: leave a margin of 10%.
if ((per_server * 11 / 10 + 100 > files)); then
	echo "$CONNS connections over $SERVERS server processes is about $per_server each: more than $files open files allow; raise SERVERS" >&2
	exit 1
fi
if ((per_client + 100 > files)); then
	echo "$per_client connections per client process exceed $files open files; raise CLIENT_PROCS" >&2
	exit 1
fi

pids=()
stop() {
	for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
	for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
}
trap stop EXIT

common=(--addr "127.0.0.1:$PORT" --reuse-port --max-connections -1 --handshake-rate -1
	--ping-interval "$PING_INTERVAL" --idle-timeout "$IDLE_TIMEOUT" --log-level warn "${ENGINE[@]}")
for i in $(seq 1 "$SERVERS"); do
	if ((i == 1)); then
		nats=(--embedded-nats "127.0.0.1:$NATS_PORT")
	else
		nats=(--nats "nats://127.0.0.1:$NATS_PORT")
	fi
	"$RALLY" serve "${common[@]}" --node "s$i" "${nats[@]}" --cluster-secret "${RALLY_CLUSTER_SECRET:-hold-100k-local-cluster-secret}" >"$OUT/server-$i.log" 2>&1 &
	pids+=($!)
	# Wait for the banner: the port is bound (and, for the first, NATS is up).
	for _ in $(seq 1 100); do
		grep -qs "listening on" "$OUT/server-$i.log" && break
		kill -0 "$!" 2>/dev/null || { cat "$OUT/server-$i.log" >&2; exit 1; }
		sleep 0.1
	done
done
sleep 1 # the NATS links settle
# Connection tracking costs an entry per connection, and connections past
# nf_conntrack_max are dropped, but only when something (a firewall rule)
# makes the kernel track connections: then the servers' NATS links are
# counted by now.
tracked=$(cat /proc/sys/net/netfilter/nf_conntrack_count 2>/dev/null || echo 0)
if ((tracked > 0)) && ((CONNS + tracked > conntrack)); then
	echo "the kernel tracks connections ($tracked now) and $CONNS more exceed nf_conntrack_max ($conntrack): connections past it are dropped" >&2
	exit 1
fi
spids=$(IFS=,; echo "${pids[*]}")
echo "servers ($MODE): pids $spids on 127.0.0.1:$PORT; logs and result in $OUT"

set -x
"$RALLY" bench idle "ws://127.0.0.1:$PORT/ws" --conns "$CONNS" --procs "$CLIENT_PROCS" \
	--source-addrs "$SOURCE_ADDRS" --ping-interval "$PING_INTERVAL" --duration "$HOLD" \
	--subscribe "$TOPIC" --broadcast "http://127.0.0.1:$PORT/publish/$TOPIC" --broadcast-size "$BROADCAST_SIZE" \
	--server-pids "$spids" --after "$AFTER" --json >"$OUT/result.json" || status=$?
set +x
# A summary for people, from the JSON.
python3 - "$OUT/result.json" "$MODE" <<'EOF' || cat "$OUT/result.json"
import json, sys
r = json.load(open(sys.argv[1])); i = r["idle"]; b = i.get("broadcast") or {}
mib = lambda n: n / 2**20
print(f"mode {sys.argv[2]}: held {i['held']} of {r['conns']} ({i.get('procs', 1)} client processes), errors {r['errors']} {r.get('error_samples') or ''}")
print(f"  handshakes {r['rate_per_s']:.0f}/s ({i['opened']} in {i['open_s']:.1f}s, subscribe acknowledged included)")
print(f"  server RSS, all processes: before {mib(i['rss_before_bytes']):.0f} MiB, held {mib(i['rss_held_bytes']):.0f} MiB, peak {mib(i['rss_peak_bytes']):.0f} MiB, end of hold {mib(i['rss_after_bytes']):.0f} MiB, {i.get('closed_after_s', 0):.0f}s after close {mib(i.get('rss_closed_bytes', 0)):.0f} MiB")
print(f"  per connection: {i['rss_per_conn_bytes'] / 1024:.2f} KiB (end of hold less before, over held)")
print(f"  pings from the servers answered {i['pings']}, pongs to the clients' pings {i['pongs']}")
if b:
    print(f"  broadcast {b['bytes']} B: {b['delivered']} of {b['subscribers']} delivered; first {b['first_s']*1e3:.0f} ms, p50 {b['latency']['p50_us']/1e3:.0f} ms, p99 {b['latency']['p99_us']/1e3:.0f} ms, last {b['last_s']*1e3:.0f} ms after the POST")
EOF
exit "${status:-0}"
