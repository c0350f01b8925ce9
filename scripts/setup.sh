#!/usr/bin/env bash
# Installs everything Hermes needs on a fresh Debian machine: the Debian packages (ZooKeeper for the
# ZooKeeper metadata repository and its tests, Java for ZooKeeper and Spark) and a virtualenv in .venv
# with the package and its extras. Safe to run again: every step is idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
[ -x /usr/share/zookeeper/bin/zkServer.sh ] || need_apt+=(zookeeper)
command -v java >/dev/null 2>&1 || need_apt+=(default-jre-headless)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${need_apt[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
extras="${HERMES_EXTRAS:-all,dev}"
stamp=".venv/.installed-$(sha1sum pyproject.toml | cut -c1-12)-${extras//,/_}"
if [ ! -f "$stamp" ]; then
  echo "setup: installing hermes-broker[$extras] into .venv (the first run builds pyspark, a few minutes)"
  .venv/bin/pip install -q --upgrade pip
  .venv/bin/pip install -q -e ".[$extras]"
  rm -f .venv/.installed-*
  touch "$stamp"
fi
echo "setup: ready"
