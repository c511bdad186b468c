#!/usr/bin/env bash
# Installs the servers coordkit's tests and demo run, with apt-get, only
# when they are missing: redis-server, redis-sentinel and ZooKeeper (Debian's
# zookeeper package, whose jars live in /usr/share/java; it needs java), and
# Chromium, whose headless mode the test of coordctl's operator page drives.
set -euo pipefail

missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v redis-sentinel >/dev/null 2>&1 || missing+=(redis-sentinel)
[ -f /usr/share/java/zookeeper.jar ] && command -v java >/dev/null 2>&1 || missing+=(zookeeper)
command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || missing+=(chromium)

if [ ${#missing[@]} -eq 0 ]; then
  echo "deps: redis-server, redis-sentinel, zookeeper and chromium are installed"
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
