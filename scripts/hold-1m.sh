#!/usr/bin/env bash
# Hold 1,000,000 idle WebSocket connections to `rally serve` on one machine,
# then publish one 16-byte message to all of them, and report the servers'
# memory per connection, the handshake rate, the time to the last delivery
# and the memory after the close (scripts/hold-100k.sh does the run; this
# script sizes it and prepares the kernel). docs/BENCHMARKS.md ("A million
# idle connections") has the figures.
#
# Both ends are on this machine, so the million connections are two
# million sockets and descriptors. A process may hold only `ulimit -Hn`
# files (20,000 where this was written), so the servers are SERVERS
# `rally serve --reuse-port` processes joined by NATS, and the clients
# CLIENT_PROCS `rally bench idle` workers, each holding its connections on
# one epoll loop. Every connection to 127.0.0.1:PORT comes from one of the
# SOURCE_ADDRS loopback addresses, each of which has its own ephemeral
# ports (net.ipv4.ip_local_port_range).
#
# What it changes, as root, for the run only (the old values are put back
# on exit):
#   net.ipv4.tcp_mem        raised to at least CONNS/2, CONNS, 2*CONNS pages,
#                           so that a page of buffer on many sockets at once
#                           (the broadcast) does not put TCP under pressure
#   net.core.somaxconn      raised to at least 4096 (the accept queues)
#   net.core.netdev_max_backlog  raised to at least 100000: every packet
#                           between the two ends waits in this queue for the
#                           loopback's turn on a CPU; past it packets are
#                           dropped (/proc/net/softnet_stat), and with the
#                           default 1000 on a busy machine the servers' TCP
#                           keepalive probes (one per connection every 15 s)
#                           were lost until the kernel gave connections up
#                           (ETIMEDOUT) by the hundred thousand
#   net.netfilter.nf_conntrack_max  raised to hold every connection, only
#                           when the kernel tracks connections at all
# Not as root, it changes nothing and says what is short.
#
# It refuses to start unless the kernel's file table (fs.file-max) has room
# for 2*CONNS more files and MemAvailable exceeds an estimate of the run's
# needs (NEED_PER_CONN bytes per connection, servers, clients and kernel
# together, plus NEED_PER_PROC per process); while it runs it stops
# everything should MemAvailable fall below MIN_FREE_MIB, so that other
# work on the machine keeps its memory.
#
# Usage: scripts/hold-1m.sh [--event-loop | --event-loop=false]
# Settings (environment), besides those of scripts/hold-100k.sh:
# CONNS (1000000), SERVERS (60), CLIENT_PROCS (60),
# SOURCE_ADDRS (127.0.0.2-127.0.0.161: 160 addresses, so that each is at
# most a quarter full: the kernel looks for a free port of a source by
# checking candidates against the established connections, and past about
# half of an address's ports that search took most of the CPU and the run
# crawled at 830,000 from 60 addresses), PING_INTERVAL (300s), IDLE_TIMEOUT
# (30m: opening a million takes minutes), HOLD (30s),
# AFTER (30s), BROADCAST_SIZE (16), NEED_PER_CONN (16384: about 10 KiB of
# kernel slab for the two sockets, 4 of server and 2 of client memory),
# NEED_PER_PROC (10 MiB), MIN_FREE_MIB (1536).
set -euo pipefail

export CONNS=${CONNS:-1000000}
export SERVERS=${SERVERS:-60}
export CLIENT_PROCS=${CLIENT_PROCS:-60}
export SOURCE_ADDRS=${SOURCE_ADDRS:-127.0.0.2-127.0.0.161}
export PING_INTERVAL=${PING_INTERVAL:-300s}
export IDLE_TIMEOUT=${IDLE_TIMEOUT:-30m}
export HOLD=${HOLD:-30s}
export AFTER=${AFTER:-30s}
export BROADCAST_SIZE=${BROADCAST_SIZE:-16}
export TOPIC=${TOPIC:-hold1m}
export OUT=${OUT:-$(mktemp -d /tmp/hold-1m.XXXXXX)}
NEED_PER_CONN=${NEED_PER_CONN:-16384}
NEED_PER_PROC=${NEED_PER_PROC:-$((10 << 20))}
MIN_FREE_MIB=${MIN_FREE_MIB:-1536}

cd "$(dirname "$0")/.."
mkdir -p "$OUT"
if [[ -z "${RALLY:-}" ]]; then
	export RALLY="$OUT/rally"
	go build -o "$RALLY" ./cmd/rally
fi

meminfo() { echo $(($(awk -v k="$1:" '$1 == k { print $2 }' /proc/meminfo) * 1024)); }
mib() { echo $(($1 >> 20)); }

# Room in the kernel's file table: both ends' descriptors.
read -r files_used _ files_max </proc/sys/fs/file-nr
if ((files_max - files_used < 2 * CONNS + 10000)); then
	echo "fs.file-max $files_max with $files_used in use: no room for 2 x $CONNS sockets" >&2
	exit 1
fi
need=$((CONNS * NEED_PER_CONN + (SERVERS + CLIENT_PROCS) * NEED_PER_PROC))
avail=$(meminfo MemAvailable)
if ((avail < need + (MIN_FREE_MIB << 20))); then
	echo "MemAvailable $(mib "$avail") MiB; the run needs about $(mib "$need") MiB and leaves $MIN_FREE_MIB MiB: try a smaller CONNS" >&2
	exit 1
fi

# Kernel settings for the run, put back on exit.
restore=()
raise() { # raise SYSCTL-PATH NEW-VALUE
	local old
	old=$(tr -s '\t ' '  ' <"$1")
	[[ "$old" == "$2" ]] && return
	if [[ -w "$1" ]] && echo "$2" >"$1" 2>/dev/null; then
		echo "set ${1#/proc/sys/} to '$2' (was '$old')"
		restore+=("$1=$old")
	else
		echo "cannot set ${1#/proc/sys/} to '$2' (is '$old'; not root?): the run may fall short" >&2
	fi
}
put_back() {
	for r in "${restore[@]}"; do
		echo "${r#*=}" >"${r%%=*}" && echo "put back ${r%%=*}: ${r#*=}"
	done
}
trap put_back EXIT

read -r mem_lo mem_press mem_hi </proc/sys/net/ipv4/tcp_mem
raise /proc/sys/net/ipv4/tcp_mem \
	"$((mem_lo > CONNS / 2 ? mem_lo : CONNS / 2)) $((mem_press > CONNS ? mem_press : CONNS)) $((mem_hi > 2 * CONNS ? mem_hi : 2 * CONNS))"
somaxconn=$(cat /proc/sys/net/core/somaxconn)
((somaxconn >= 4096)) || raise /proc/sys/net/core/somaxconn 4096
backlog=$(cat /proc/sys/net/core/netdev_max_backlog)
((backlog >= 100000)) || raise /proc/sys/net/core/netdev_max_backlog 100000
if [[ -r /proc/sys/net/netfilter/nf_conntrack_count ]] && (($(cat /proc/sys/net/netfilter/nf_conntrack_count) > 0)); then
	ct_max=$(cat /proc/sys/net/netfilter/nf_conntrack_max)
	((ct_max > CONNS + 100000)) || raise /proc/sys/net/netfilter/nf_conntrack_max $((CONNS + 100000))
fi

echo "$CONNS connections: $SERVERS servers, $CLIENT_PROCS client processes, sources $SOURCE_ADDRS;" \
	"MemAvailable $(mib "$avail") MiB, about $(mib "$need") MiB needed; logs in $OUT"

# The run, in its own process group, so that the watchdog can stop all of it.
setsid bash scripts/hold-100k.sh "$@" &
run=$!
# Watchdog and sampler: the servers' and the clients' memory and the
# kernel's slab (socket structures) every 2 s, the peaks kept in
# $OUT/memory.txt; everything stops if the machine runs short.
peak_srv=0 peak_cli=0 peak_slab=0 slab0=$(meminfo Slab) low=0
while kill -0 "$run" 2>/dev/null; do
	sleep 2
	read -r srv cli < <(ps -eo rss=,args= | awk -v bin="$RALLY" '$2 == bin && $3 == "serve" { s += $1 } $2 == bin && $3 == "bench" { c += $1 } END { printf "%.0f %.0f\n", s, c }')
	srv=$((srv * 1024)) cli=$((cli * 1024))
	slab=$(meminfo Slab)
	peak_srv=$((srv > peak_srv ? srv : peak_srv)) peak_cli=$((cli > peak_cli ? cli : peak_cli)) peak_slab=$((slab > peak_slab ? slab : peak_slab))
	avail=$(meminfo MemAvailable)
	if ((avail < MIN_FREE_MIB << 20)); then
		echo "MemAvailable $(mib "$avail") MiB is below $MIN_FREE_MIB MiB: stopping the run" >&2
		kill -TERM -- "-$run" 2>/dev/null || true
		low=1
		break
	fi
done
status=0
wait "$run" || status=$?
{
	echo "peak RSS of the servers $(mib "$peak_srv") MiB, of the clients $(mib "$peak_cli") MiB (each the sum over its processes)"
	echo "peak kernel slab $(mib "$peak_slab") MiB ($(mib $((peak_slab - slab0))) MiB over the start: sockets, files, epoll entries of both ends)"
} | tee "$OUT/memory.txt"
((low == 0)) || exit 1
exit "$status"
