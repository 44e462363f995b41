#!/usr/bin/env bash
# horovod.spark.run on a Spark standalone cluster across two network-namespace hosts
# (tests/netns/netbed.sh, host names h1 and h2): the master on h1 and a worker of 2 cores on
# each host, started with Spark's own script (sbin/spark-daemon.sh, pyspark's Spark); the
# driver on h1. h1 also has eth1, on a network h2 cannot reach.
#   1. Four ranks, two per host: the tasks of each executor share a host (local ranks 0 and 1),
#      and NIC discovery through the tasks settles on eth0, the one interface both hosts reach
#      each other on.
#   2. The Quick start's CNN trains across the hosts through horovod.spark.run and ends with
#      the weights digest of horovodrun's run of the same script on the same hosts over ssh.
# HVD_PYTHON: the interpreter with pyspark (the venv's; set by tests/netns/netns.cmake).
# Exit 0 pass, 1 fail, 77 skip (not root, no ip netns or sshd, no pyspark or java).
set -euo pipefail
: "${HVD_BUILD_DIR:?set by ctest}" "${HVD_SOURCE_DIR:?set by ctest}" "${HVD_PYTHON:?set by ctest}"
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
netns_require test_spark
SPARK_HOME=$("$HVD_PYTHON" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))' \
  2>/dev/null) || netns_skip "$HVD_PYTHON has no pyspark"
command -v java >/dev/null || netns_skip "no java (pyspark needs it)"
export SPARK_HOME

TMP=$(mktemp -d /tmp/hvd-spark.XXXXXX)
netns_tmp=$TMP
netns_bed_up 2 --isolated 1 --hostnames
export PYTHONPATH=$HVD_BUILD_DIR/python PYTHONDONTWRITEBYTECODE=1 PYSPARK_PYTHON=$HVD_PYTHON
export HOME=$TMP/home # (horovodrun's start-up cache)
mkdir -p "$HOME"
MASTER=spark://10.77.0.1:7077

# spark_daemon HOST CLASS ARGS...: Spark's daemon script on HOST, its files under $TMP/HOST
spark_daemon() {
  local h=$1 ip=10.77.0.${1#h}
  shift
  mkdir -p "$TMP/$h"
  bash "$netbed" exec "$h" env SPARK_LOCAL_IP="$ip" SPARK_LOG_DIR="$TMP/$h/logs" SPARK_PID_DIR="$TMP/$h/pid" \
    SPARK_WORKER_DIR="$TMP/$h/work" \
    timeout 60 "$SPARK_HOME/sbin/spark-daemon.sh" start "$@" </dev/null >"$TMP/$h/start.log" 2>&1 ||
    fail "spark-daemon.sh start $* on $h: $(cat "$TMP/$h/start.log")"
}
spark_daemon h1 org.apache.spark.deploy.master.Master 1 --host 10.77.0.1 --port 7077 \
  --webui-port 8080
for h in h1 h2; do
  spark_daemon "$h" org.apache.spark.deploy.worker.Worker 1 --cores 2 --memory 2g \
    --webui-port 8081 "$MASTER"
done

# The driver, on h1: waits for both executors, then runs (1) and (2).
cat >"$TMP/driver.py" <<'PY'
import json, os, socket, sys, time
sys.path.insert(0, os.path.join(os.environ["HVD_SOURCE_DIR"], "examples", "pytorch"))
import pytorch_fashion_mnist as example
from pyspark import cloudpickle
from pyspark.sql import SparkSession
import horovod.spark

spark = (SparkSession.builder.master(sys.argv[1]).appName("hvd-netns-spark")
         .config("spark.driver.host", "10.77.0.1").config("spark.driver.bindAddress", "10.77.0.1")
         .config("spark.executor.cores", "2").config("spark.cores.max", "4")
         .config("spark.executor.memory", "768m").config("spark.ui.enabled", "false")
         .getOrCreate())
sc = spark.sparkContext
sc.setLogLevel("ERROR")
deadline = time.monotonic() + 120
while sc._jsc.sc().getExecutorMemoryStatus().size() < 3:  # (two executors and the driver)
    if time.monotonic() > deadline:
        sys.exit("the two executors did not register within 120 s")
    time.sleep(0.2)

def train(flags):
    """Where this rank runs, then the Quick start's training."""
    where = {"host": socket.gethostname(), "hash": os.environ["HOROVOD_HOSTNAME"],
             "rank": int(os.environ["HOROVOD_RANK"]),
             "local_rank": int(os.environ["HOROVOD_LOCAL_RANK"]),
             "local_size": int(os.environ["HOROVOD_LOCAL_SIZE"]),
             "iface": os.environ["HOROVOD_GLOO_IFACE"]}
    return where, example.main(flags)

cloudpickle.register_pickle_by_value(example)
results = horovod.spark.run(train, args=(sys.argv[2:],), num_proc=4, start_timeout=120)
print("RESULT " + json.dumps({"placement": [w for w, _ in results],
                              "digests": [r["weights_digest"][:16] for _, r in results]}))
spark.stop()
PY
flags=(--epochs 1 --train-limit 2000 --test-limit 500 --num-threads 1)
# (through netbed exec: in h1's UTS namespace, whose host name h1 resolves there, as the JVM
# needs; on would keep this machine's)
bash "$netbed" exec h1 env HVD_SOURCE_DIR="$HVD_SOURCE_DIR" timeout -k 5 240 "$HVD_PYTHON" \
  "$TMP/driver.py" "$MASTER" "${flags[@]}" </dev/null >"$TMP/driver.out" 2>"$TMP/driver.err" ||
  fail "the driver failed: $(grep -v '^\s*at ' "$TMP/driver.err" | tail -30)"
result=$(sed -n 's/^RESULT //p' "$TMP/driver.out")
[[ -n $result ]] || fail "the driver printed no result: $(tail -20 "$TMP/driver.out")"

# 1. placement and interface
"$HVD_PYTHON" - "$result" <<'PY' || fail "placement or interface wrong: $result"
import json, sys
r = json.loads(sys.argv[1])["placement"]
assert [p["rank"] for p in r] == [0, 1, 2, 3], r
hosts = sorted({p["host"] for p in r})
assert hosts == ["h1", "h2"], r
for h in hosts:
    mine = [p for p in r if p["host"] == h]
    assert sorted(p["local_rank"] for p in mine) == [0, 1] and all(p["local_size"] == 2 for p in mine), r
    assert len({p["hash"] for p in mine}) == 1, r
assert all(p["iface"] == "eth0" for p in r), r
PY
ok "4 ranks in Spark tasks on 2 standalone workers: 2 per host, on eth0 (h1's eth1 rejected)"

# 2. the same training under horovodrun over ssh, on the same hosts
bash "$netbed" exec h1 timeout -k 5 240 "$HVD_BUILD_DIR/horovodrun" -np 4 -H h1:2,h2:2 "$HVD_PYTHON" \
  "$HVD_SOURCE_DIR/examples/pytorch/pytorch_fashion_mnist.py" "${flags[@]}" \
  </dev/null >"$TMP/hvdrun.out" 2>&1 || fail "horovodrun's run failed: $(tail -20 "$TMP/hvdrun.out")"
want=$(sed -n 's/.*weights digest \([0-9a-f]*\) .*/\1/p' "$TMP/hvdrun.out")
[[ -n $want ]] || fail "horovodrun's run printed no digest: $(tail -5 "$TMP/hvdrun.out")"
got=$("$HVD_PYTHON" -c 'import json, sys; print(" ".join(json.loads(sys.argv[1])["digests"]))' "$result")
[[ $got == "$want $want $want $want" ]] ||
  fail "horovod.spark.run's weights ($got) differ from horovodrun's ($want)"
ok "the CNN trained across 2 hosts through Spark ends with horovodrun's weights ($want)"
