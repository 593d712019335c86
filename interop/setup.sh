#!/usr/bin/env bash
# setup.sh installs the real peers the interop tests talk to, on a Debian
# machine: npm ws and undici (npm ci in interop/node), Chromium, Python's
# websockets, the proxy servers the client is tested through and qemu-user
# (apt). It is idempotent and returns at once when everything is already there: npm
# ci runs only when node_modules is missing or was installed from another
# lock file, apt only when a package is missing.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

as_root() {
	if [ "$(id -u)" -eq 0 ]; then
		"$@"
	elif command -v sudo >/dev/null 2>&1; then
		sudo "$@"
	else
		echo "interop/setup.sh: need root (or sudo) to run: $*" >&2
		exit 1
	fi
}

installed() {
	dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'
}

# Debian packages: node comes from the machine's image when it has one
# (nodejs, Node 20); chromium and python3-websockets from Debian.
missing=()
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)
installed chromium || missing+=(chromium)
installed python3-websockets || missing+=(python3-websockets)
# The proxies the client is tested through: tinyproxy (HTTP), stunnel in
# front of it (HTTPS), Dante and microsocks (SOCKS5, without and with
# user/password).
installed tinyproxy-bin || missing+=(tinyproxy-bin)
installed stunnel4 || missing+=(stunnel4)
installed dante-server || missing+=(dante-server)
installed microsocks || missing+=(microsocks)
# qemu-user runs the tests built for arm64 and arm (scripts/test-qemu.sh).
installed qemu-user || missing+=(qemu-user)
if [ "${#missing[@]}" -gt 0 ]; then
	echo "interop/setup.sh: installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	as_root apt-get update -q
	as_root apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# npm packages, pinned by interop/node/package-lock.json. The stamp records
# the lock file node_modules was installed from.
cd "$here/node"
stamp=node_modules/.rally-lock.sha256
want="$(sha256sum package-lock.json | cut -d' ' -f1)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ] || [ ! -d node_modules/ws ] || [ ! -d node_modules/undici ]; then
	echo "interop/setup.sh: npm ci in interop/node"
	npm ci --no-audit --no-fund --loglevel=error
	echo "$want" >"$stamp"
fi
