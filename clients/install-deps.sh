#!/usr/bin/env bash
# Installs what generating and testing the example clients needs, or says in one line
# what is missing: protoc, grpc_python_plugin and Python's grpcio/protobuf (Debian
# packages, installed with apt-get when run as root) and the npm packages pinned in
# node/package-lock.json (npm ci, rerun only when the lock file changes).
set -euo pipefail
cd "$(dirname "$0")"

apt_packages=(protobuf-compiler protobuf-compiler-grpc python3-grpcio python3-protobuf)

have_python_grpc() {
	local py
	for py in "${QUARRY_PYTHON:-}" python3 /usr/bin/python3; do
		[[ -n $py ]] && command -v "$py" >/dev/null 2>&1 &&
			"$py" -c 'import grpc, google.protobuf' >/dev/null 2>&1 && return 0
	done
	return 1
}

if ! command -v protoc >/dev/null || ! command -v grpc_python_plugin >/dev/null || ! have_python_grpc; then
	if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
		echo "client-deps: apt-get install ${apt_packages[*]}"
		log=$(mktemp)
		if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${apt_packages[@]}"; } >"$log" 2>&1; then
			cat "$log" >&2
			rm -f "$log"
			echo "client-deps: apt-get install failed" >&2
			exit 1
		fi
		rm -f "$log"
	else
		echo "client-deps: the Python client needs protoc, grpc_python_plugin and python3 with grpcio and protobuf: sudo apt-get install ${apt_packages[*]} (or set QUARRY_PYTHON to a python3 that has them)" >&2
		exit 1
	fi
fi

if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
	echo "client-deps: the TypeScript client needs Node.js >= 20 and npm (https://nodejs.org/en/download)" >&2
	exit 1
fi
if (($(node -p 'process.versions.node.split(".")[0]') < 20)); then
	echo "client-deps: the TypeScript client needs Node.js >= 20, found $(node --version)" >&2
	exit 1
fi
# npm ci wipes node_modules; skip it while the installed tree matches the lock file.
if ! cmp -s node/package-lock.json node/node_modules/.quarry-package-lock.json 2>/dev/null; then
	echo "client-deps: npm ci in clients/node"
	(cd node && npm ci --no-audit --no-fund --loglevel=error)
	cp node/package-lock.json node/node_modules/.quarry-package-lock.json
fi
