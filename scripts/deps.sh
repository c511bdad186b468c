#!/usr/bin/env bash
# Installs the servers coordkit's tests and demo run, with apt-get, only
# when they are missing: redis-server, redis-sentinel and ZooKeeper (Debian's
# zookeeper package, whose jars live in /usr/share/java; it needs java).
set -euo pipefail

missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v redis-sentinel >/dev/null 2>&1 || missing+=(redis-sentinel)
[ -f /usr/share/java/zookeeper.jar ] && command -v java >/dev/null 2>&1 || missing+=(zookeeper)

if [ ${#missing[@]} -eq 0 ]; then
  echo "deps: redis-server, redis-sentinel and zookeeper are installed"
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
