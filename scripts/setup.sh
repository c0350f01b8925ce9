#!/usr/bin/env bash
# Installs everything Hermes needs on a fresh Debian machine: the Debian packages (ZooKeeper for the
# ZooKeeper metadata repository and its tests, Java for Kafka, ZooKeeper and Spark, Maven to fetch jars, wrk and a
# C compiler for the benchmark, npm to fetch the web console's htmx, Chromium and its driver for the console's
# browser tests), a virtualenv in .venv with the package and its extras, the benchmark's open-loop generator
# (bench/openloop/openloop.c) built into .venv/bin, htmx in .venv/share/hermes/js, and the pinned jars of
# jars/*.pom.xml (the embedded Apache Kafka broker, Spark's Kafka connector) in .venv/share/hermes/jars. Safe to
# run again: every step is idempotent, and nothing is downloaded at run time.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
[ -x /usr/share/zookeeper/bin/zkServer.sh ] || need_apt+=(zookeeper)
command -v java >/dev/null 2>&1 || need_apt+=(openjdk-17-jre-headless)
command -v mvn >/dev/null 2>&1 || need_apt+=(maven)
command -v wrk >/dev/null 2>&1 || need_apt+=(wrk)  # the load generator of hermes bench's publish maxima
command -v gcc >/dev/null 2>&1 || need_apt+=(gcc)  # builds hermes-openloop, hermes bench's fixed-rate generator
[ -f /usr/include/stdio.h ] || need_apt+=(libc6-dev)
command -v npm >/dev/null 2>&1 || need_apt+=(npm)  # fetches htmx, the web console's script, from the npm registry
extras="${HERMES_EXTRAS:-all,dev}"
if [[ ",$extras," == *",dev,"* ]]; then  # the console's browser tests: Debian's Chromium, no browser download
  command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
  command -v chromedriver >/dev/null 2>&1 || need_apt+=(chromium-driver)
fi
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${need_apt[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
stamp=".venv/.installed-$(sha1sum pyproject.toml | cut -c1-12)-${extras//,/_}"
if [ ! -f "$stamp" ]; then
  echo "setup: installing hermes-broker[$extras] into .venv (the first run builds pyspark, a few minutes)"
  .venv/bin/pip install -q --upgrade pip
  .venv/bin/pip install -q -e ".[$extras]"
  rm -f .venv/.installed-*
  touch "$stamp"
fi

# hermes-openloop, rebuilt only when its source changes.
openloop_stamp=".venv/.openloop-$(sha1sum bench/openloop/openloop.c | cut -c1-12)"
if [ ! -f "$openloop_stamp" ] || [ ! -x .venv/bin/hermes-openloop ]; then
  echo "setup: building hermes-openloop"
  gcc -O2 -Wall -Wextra -o .venv/bin/hermes-openloop bench/openloop/openloop.c
  rm -f .venv/.openloop-*
  touch "$openloop_stamp"
fi

# htmx for the web console (docs/console.md), pinned, from the npm registry into .venv/share/hermes/js.
htmx_version="2.0.11"
js=".venv/share/hermes/js"
if [ ! -f "$js/.htmx-$htmx_version" ]; then
  echo "setup: fetching htmx $htmx_version from the npm registry"
  tmp="$(mktemp -d)"
  (cd "$tmp" && npm pack --silent "htmx.org@$htmx_version" >/dev/null && tar -xzf htmx.org-*.tgz)
  mkdir -p "$js"
  cp "$tmp/package/dist/htmx.min.js" "$js/htmx.min.js"
  cp "$tmp/package/LICENSE" "$js/htmx.LICENSE"
  rm -rf "$tmp" "$js"/.htmx-*
  touch "$js/.htmx-$htmx_version"
fi

# Each jars/NAME.pom.xml becomes .venv/share/hermes/jars/NAME/*.jar, through a Maven cache inside .venv.
for pom in jars/*.pom.xml; do
  name="$(basename "$pom" .pom.xml)"
  target=".venv/share/hermes/jars/$name"
  jar_stamp="$target/.fetched-$(sha1sum "$pom" | cut -c1-12)"
  if [ ! -f "$jar_stamp" ]; then
    echo "setup: fetching the $name jars with Maven"
    rm -rf "$target"
    mvn -q -B -Dstyle.color=never -f "$pom" -Dmaven.repo.local="$PWD/.venv/share/hermes/maven" \
      dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$PWD/$target"
    touch "$jar_stamp"
  fi
done
echo "setup: ready"
