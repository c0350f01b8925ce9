#!/usr/bin/env bash
# Installs what Hermes needs on a fresh Debian machine, in steps it names as it goes: the Debian packages (Java
# for Kafka and Spark, Maven to fetch jars, npm to fetch the web console's htmx, a C compiler with Python's and
# xxHash's headers for the package's compiled module; with the test and benchmark tools also ZooKeeper for the
# ZooKeeper metadata repository's tests, Chromium and its driver for the console's browser tests, wrk), a
# virtualenv in .venv with the package and the extras of HERMES_EXTRAS (default all,dev: everything; `make run` asks
# only for what running needs), the benchmark's open-loop generator
# (bench/openloop/openloop.c) built into .venv/bin, and, fetched beside pip's install, htmx in .venv/share/hermes/js
# and the pinned jars of jars/*.pom.xml (the embedded Apache Kafka broker, Spark's Kafka connector, Delta Lake) in
# .venv/share/hermes/jars. Safe to run again: every step is idempotent, and nothing is downloaded at run time.
set -euo pipefail
cd "$(dirname "$0")/.."

extras="${HERMES_EXTRAS:-all,dev}"
has_extra() { case ",$extras," in *",$1,"* | *",all,"*) return 0 ;; *) return 1 ;; esac; }
say() { echo "setup: $*"; }
steps=6
step=0
next() { step=$((step + 1)); say "[$step/$steps] $*"; }

next "Debian packages"
need_apt=()
command -v java >/dev/null 2>&1 || need_apt+=(openjdk-17-jre-headless)
command -v mvn >/dev/null 2>&1 || need_apt+=(maven)
command -v npm >/dev/null 2>&1 || need_apt+=(npm)  # fetches htmx, the web console's script, from the npm registry
# the package's compiled module (src/hermes/frontend/key_table.c, the idempotency keys) is built by pip install: a C
# compiler, libc's, Python's and xxHash's headers (XXH3 inlined from Debian's libxxhash-dev: no library at run time)
command -v gcc >/dev/null 2>&1 || need_apt+=(gcc)
[ -f /usr/include/stdio.h ] || need_apt+=(libc6-dev)
[ -f /usr/include/xxhash.h ] || need_apt+=(libxxhash-dev)
python3 -c 'import os, sysconfig; os.stat(sysconfig.get_paths()["include"] + "/Python.h")' 2>/dev/null \
  || need_apt+=(python3-dev)
if has_extra dev; then  # the tests' ZooKeeper server, and Debian's Chromium for the console's browser tests
  [ -x /usr/share/zookeeper/bin/zkServer.sh ] || need_apt+=(zookeeper)
  command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
  command -v chromedriver >/dev/null 2>&1 || need_apt+=(chromium-driver)
  # ActiveMQ for the jms:// sender's tests, which run it as a process of their own; the package's service starts
  # no broker (none of its instances is enabled in /etc/activemq/instances-enabled)
  [ -f /usr/share/activemq/bin/activemq.jar ] || need_apt+=(activemq)
fi
if has_extra bench; then
  command -v wrk >/dev/null 2>&1 || need_apt+=(wrk)  # the load generator of hermes bench's publish maxima
fi
if [ ${#need_apt[@]} -gt 0 ]; then
  say "  installing ${need_apt[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
else
  say "  already installed"
fi

# htmx for the web console (docs/console.md), pinned, from the npm registry into .venv/share/hermes/js.
fetch_htmx() {
  htmx_version="2.0.11"
  js=".venv/share/hermes/js"
  if [ -f "$js/.htmx-$htmx_version" ]; then
    say "  htmx $htmx_version: already fetched"
  else
    say "  htmx $htmx_version: fetching from the npm registry"
    tmp="$(mktemp -d)"
    (cd "$tmp" && npm pack --silent "htmx.org@$htmx_version" >/dev/null && tar -xzf htmx.org-*.tgz)
    mkdir -p "$js"
    cp "$tmp/package/dist/htmx.min.js" "$js/htmx.min.js"
    cp "$tmp/package/LICENSE" "$js/htmx.LICENSE"
    rm -rf "$tmp" "$js"/.htmx-*
    touch "$js/.htmx-$htmx_version"
    say "  htmx $htmx_version: fetched"
  fi
}

# Each jars/NAME.pom.xml becomes .venv/share/hermes/jars/NAME/*.jar, through a Maven cache inside .venv.
fetch_jars() {
  # jansi.noreset: Maven's console library writes colour resets (ESC[0m) when it closes, -B and style.color or not.
  poms=(jars/*.pom.xml)
  for i in "${!poms[@]}"; do
    pom="${poms[$i]}"
    name="$(basename "$pom" .pom.xml)"
    target=".venv/share/hermes/jars/$name"
    jar_stamp="$target/.fetched-$(sha1sum "$pom" | cut -c1-12)"
    if [ -f "$jar_stamp" ]; then
      say "  ($((i + 1))/${#poms[@]}) $name: already fetched"
      continue
    fi
    say "  ($((i + 1))/${#poms[@]}) $name: fetching"
    rm -rf "$target"
    MAVEN_OPTS="${MAVEN_OPTS:-} -Djansi.noreset=true" mvn -q -B -ntp -Dstyle.color=never -f "$pom" \
      -Dmaven.repo.local="$PWD/.venv/share/hermes/maven" \
      dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$PWD/$target"
    touch "$jar_stamp"
    say "  ($((i + 1))/${#poms[@]}) $name: $(find "$target" -name '*.jar' | wc -l) jars"
  done
}

# The jars and htmx come from the network while pip installs (minutes on a fresh machine, the longest step), in a
# subshell of their own (set -e holds in it): its lines are shown once pip is done, and its failure stops the set-up.
next "jars (Maven Central) and htmx (npm registry): fetched in the background"
mkdir -p .venv
fetch_log="$(mktemp)"
trap 'rm -f "$fetch_log"' EXIT
(fetch_htmx; fetch_jars) >"$fetch_log" 2>&1 &
fetching=$!

next "Python packages: hermes-broker[$extras] in .venv"
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
# One stamp per pyproject.toml, compiled module and set of extras; a stamp of all,dev covers every smaller set. The
# module is built into the source tree (an editable install): a tree without it installs again.
hash="$(cat pyproject.toml setup.py src/hermes/frontend/key_table.c | sha1sum | cut -c1-12)"
stamp=".venv/.installed-$hash-${extras//,/_}"
built=(src/hermes/frontend/key_table.*.so)
if [ -f "${built[0]}" ] && { [ -f "$stamp" ] || [ -f ".venv/.installed-$hash-all_dev" ]; }; then
  say "  already installed"
else
  say "  the first time takes minutes (pyspark alone is 300 MB); each package as it comes:"
  .venv/bin/pip install -q --upgrade pip
  .venv/bin/pip install --progress-bar off -e ".[$extras]" \
    | { grep --line-buffered -E '^(Collecting|Successfully installed)' || true; } \
    | sed -u -e 's/ (from .*//' -e 's/^Collecting /setup:   collecting /' -e 's/^Successfully installed .*/setup:   installed/'
  rm -f .venv/.installed-*
  touch "$stamp"
fi

next "hermes-openloop (the benchmark's generator)"
openloop_stamp=".venv/.openloop-$(sha1sum bench/openloop/openloop.c | cut -c1-12)"
if ! has_extra bench; then
  say "  skipped: only for hermes bench (HERMES_EXTRAS without bench)"
elif [ ! -f "$openloop_stamp" ] || [ ! -x .venv/bin/hermes-openloop ]; then
  gcc -O2 -Wall -Wextra -o .venv/bin/hermes-openloop bench/openloop/openloop.c
  rm -f .venv/.openloop-*
  touch "$openloop_stamp"
  say "  built"
else
  say "  already built"
fi

next "jars and htmx: waiting for the background fetch"
status=0
wait "$fetching" || status=$?
cat "$fetch_log"
[ "$status" -eq 0 ] || { say "  the fetch of the jars or htmx failed (exit $status)"; exit "$status"; }
say "ready"
