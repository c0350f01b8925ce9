#!/usr/bin/env bash
# Distributed Hermes on one machine, one process per role (docs/deployment.md): ZooKeeper, `hermes run` (the
# embedded Kafka broker, management, a frontend and consumer node node-0), a second management, a second
# frontend and two more consumer nodes. Ctrl-C stops them all. Logs and data go to $DIR (.hermes-cluster).
set -euo pipefail

DIR=${DIR:-.hermes-cluster}
HERMES=${HERMES:-hermes}
ZK_PORT=${ZK_PORT:-2181}
mkdir -p "$DIR/zookeeper"
pids=()
stop() {  # Hermes first, ZooKeeper last: stopping nodes leave the cluster at once
  trap - INT TERM EXIT
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  kill "$zookeeper" 2>/dev/null || true
  wait
}
trap stop INT TERM EXIT

cat >"$DIR/zookeeper/zoo.cfg" <<CFG
tickTime=500
dataDir=$PWD/$DIR/zookeeper/data
clientPort=$ZK_PORT
clientPortAddress=127.0.0.1
admin.enableServer=false
4lw.commands.whitelist=ruok
CFG
java -Xmx256m -Dzookeeper.log.dir="$DIR/zookeeper" -cp "/etc/zookeeper/conf:/usr/share/java/zookeeper.jar" \
  org.apache.zookeeper.server.quorum.QuorumPeerMain "$DIR/zookeeper/zoo.cfg" >"$DIR/zookeeper.log" 2>&1 &
zookeeper=$!
zookeeper_ok() { [ "$(exec 3<>/dev/tcp/127.0.0.1/"$ZK_PORT" && echo ruok >&3 && head -c4 <&3)" = imok ]; } 2>/dev/null
until zookeeper_ok; do sleep 0.2; done

cluster=(--metadata-store zookeeper --zookeeper-connect "127.0.0.1:$ZK_PORT")
# one key for the stored secrets in every process: each has a data directory of its own (docs/security.md)
HERMES_SECRETS_KEYS="${HERMES_SECRETS_KEYS:-$("$HERMES" secrets key)}"
export HERMES_SECRETS_KEYS
wait_healthy() { until curl -fs "$1/status/health" >/dev/null; do sleep 0.3; done; }

"$HERMES" run "${cluster[@]}" --data-dir "$DIR/run" --node-id node-0 --no-pipeline >"$DIR/run.log" 2>&1 &
pids+=($!)
wait_healthy http://127.0.0.1:8090
"$HERMES" management "${cluster[@]}" --data-dir "$DIR/management-2" --management-port 8091 \
  >"$DIR/management-2.log" 2>&1 &
pids+=($!)
"$HERMES" frontend "${cluster[@]}" --data-dir "$DIR/frontend-2" --frontend-port 8081 --workers 1 \
  >"$DIR/frontend-2.log" 2>&1 &
pids+=($!)
for n in 1 2; do
  "$HERMES" consumers "${cluster[@]}" --data-dir "$DIR/node-$n" --node-id "node-$n" --consumers-port "807$n" \
    >"$DIR/node-$n.log" 2>&1 &
  pids+=($!)
done
wait_healthy http://127.0.0.1:8091
wait_healthy http://127.0.0.1:8081
echo "frontends: http://127.0.0.1:8080 http://127.0.0.1:8081; management: http://127.0.0.1:8090 http://127.0.0.1:8091"
echo "consumer nodes: curl http://127.0.0.1:8090/consumers/nodes; logs in $DIR; Ctrl-C stops everything"
wait -n "${pids[@]}"
