#!/usr/bin/env bash
# Installs the servers coordkit's tests and demo run, with apt-get, only
# when they are missing: redis-server, redis-sentinel, ZooKeeper (Debian's
# zookeeper package, whose jars live in /usr/share/java; it needs java),
# MariaDB (mariadb-server: mariadbd and mariadb-install-db), PostgreSQL
# (postgresql: initdb and postgres, in /usr/lib/postgresql/<version>/bin),
# and Chromium, whose headless mode the test of coordctl's operator page
# drives. The tests start their own servers on loopback ports in temporary
# directories; a service the packages start is not used.
set -euo pipefail

missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v redis-sentinel >/dev/null 2>&1 || missing+=(redis-sentinel)
[ -f /usr/share/java/zookeeper.jar ] && command -v java >/dev/null 2>&1 || missing+=(zookeeper)
{ command -v mariadbd || [ -x /usr/sbin/mariadbd ]; } >/dev/null 2>&1 && command -v mariadb-install-db >/dev/null 2>&1 || missing+=(mariadb-server)
{ command -v postgres && command -v initdb; } >/dev/null 2>&1 || compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || missing+=(postgresql)
command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || missing+=(chromium)

if [ ${#missing[@]} -eq 0 ]; then
  echo "deps: redis-server, redis-sentinel, zookeeper, mariadb-server, postgresql and chromium are installed"
  exit 0
fi

echo "deps: installing ${missing[*]}"
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  sudo="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq "${missing[@]}" >/dev/null
echo "deps: installed ${missing[*]}"
