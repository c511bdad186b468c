#!/usr/bin/env bash
# Installs the servers coordkit's tests and demo run, with apt-get, only
# when they are missing: redis-server, redis-sentinel, ZooKeeper (Debian's
# zookeeper package, whose jars live in /usr/share/java; it needs java),
# MariaDB (mariadb-server: mariadbd and mariadb-install-db), PostgreSQL
# (postgresql: initdb and postgres, in /usr/lib/postgresql/<version>/bin),
# etcd (etcd-server, 3.4: /usr/bin/etcd, for the etcd module), and
# Chromium, whose headless mode the test of coordctl's operator page drives. The tests start their own servers on loopback ports in temporary
# directories; a service the packages start is not used.
#
# It says what it installs and why before it starts, then shows apt-get's
# progress: the packages downloaded and set up, out of how many (the
# missing ones and their dependencies, as apt-get plans them).
set -euo pipefail

missing=()
why=()
need() { # need PACKAGE REASON
	missing+=("$1")
	why+=("$(printf '  %-15s %s' "$1" "$2")")
}
command -v redis-server >/dev/null 2>&1 ||
	need redis-server "Redis: the locks, Redlock, semaphores, ID segments and worker leases (tests, make demo)"
command -v redis-sentinel >/dev/null 2>&1 ||
	need redis-sentinel "Redis Sentinel: the tests of locks behind a Sentinel failover"
[ -f /usr/share/java/zookeeper.jar ] && command -v java >/dev/null 2>&1 ||
	need zookeeper "ZooKeeper and the Java it runs on: zklock, worker IDs, the withdrawal demo"
{ command -v mariadbd || [ -x /usr/sbin/mariadbd ]; } >/dev/null 2>&1 && command -v mariadb-install-db >/dev/null 2>&1 ||
	need mariadb-server "MariaDB: sqllock, sqlid and the SQL worker IDs (tests), the tickets demo's mysql:* strategies"
{ command -v postgres && command -v initdb; } >/dev/null 2>&1 || compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null ||
	need postgresql "PostgreSQL: the same on PostgreSQL, the tickets demo's pg:* strategies"
command -v etcd >/dev/null 2>&1 ||
	need etcd-server "etcd: the etcd module's lock (etcd/etcdlock), on a member or a 3-member cluster the tests start"
command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 ||
	need chromium "headless Chromium: the tests that render coordctl serve's page and its charts"

if [ ${#missing[@]} -eq 0 ]; then
	echo "deps: redis-server, redis-sentinel, zookeeper, mariadb-server, postgresql, etcd-server and chromium are installed"
	exit 0
fi

echo "deps: installing ${#missing[@]} Debian package(s) with apt-get, for the servers the tests and the demo start:"
printf '%s\n' "${why[@]}"
sudo=""
if [ "$(id -u)" -ne 0 ]; then
	sudo="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
start=$SECONDS
echo "deps: [1/2] apt-get update (the package lists)"
$sudo apt-get update -qq
total=$($sudo apt-get install -s "${missing[@]}" | grep -c '^Inst ' || true)
echo "deps: [2/2] apt-get install: ${#missing[@]} package(s) and their dependencies, $total in all"
# apt-get's own lines, reduced to a count of packages downloaded and one
# line per package set up; its errors and warnings pass through.
$sudo apt-get install -y -o Dpkg::Use-Pty=0 "${missing[@]}" 2>&1 | awk -v total="$total" '
	/^Get:/ { got++; if (got % 20 == 0 || got == total) { printf "deps:   downloaded %d of %d\n", got, total; fflush() } }
	/^Setting up / { set++; printf "deps:   set up %d of %d: %s\n", set, total, $3; fflush() }
	/^(E|W):/ { print; fflush() }'
echo "deps: installed ${missing[*]} in $((SECONDS - start)) s"
