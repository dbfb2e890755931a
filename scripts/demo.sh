#!/usr/bin/env bash
# make demo: bring up the local cluster (real control plane and Prometheus, simulated nodes in three
# pools), run a sample workload on it, and leave it up for inspection. The recommender and updater demo
# (issue "make demo: the main job end to end") extends this once those commands exist.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
DIR=.cluster

if [[ -f $DIR/cluster.json ]] && $PY -m tests.harness status >/dev/null 2>&1; then
  echo "a local cluster is already up; stopping it first"
  $PY -m tests.harness down
fi
port=$($PY -c 'from tests.harness.process import free_port; print(free_port())')
$PY -m tests.harness up --scrape "127.0.0.1:$port"
export KUBECONFIG=$PWD/$DIR/admin.kubeconfig

echo "starting the node simulator: pools small (4 x 2 CPU / 8Gi), medium (3 x 8 / 32Gi), large (2 x 32 / 128Gi)"
setsid $PY -m tests.nodesim --kubeconfig "$KUBECONFIG" --metrics-port "$port" --labels podtailor,karpenter \
  --trace-dir ../shared/traces \
  --pool small=4:2:8Gi:sim.small --pool medium=3:8:32Gi:sim.medium --pool large=2:32:128Gi:sim.large \
  >"$DIR/logs/nodesim.log" 2>&1 < /dev/null &
echo $! > "$DIR/nodesim.pid"

$PY - <<'PYEOF'
import json, time
from kubernetes import client, config
api = config.new_client_from_config(config_file=".cluster/admin.kubeconfig")
core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
deadline = time.monotonic() + 60
while sum(1 for n in core.list_node().items if not n.spec.taints) < 9:
    if time.monotonic() > deadline:
        raise SystemExit("nodes did not become Ready and untainted; see .cluster/logs/nodesim.log")
    time.sleep(0.5)
core.create_namespace({"metadata": {"name": "demo"}})
while not core.list_namespaced_service_account("demo").items:
    time.sleep(0.2)
usage = {"kind": "daily", "cpu_cores": 0.3, "cpu_amplitude": 0.2, "memory_bytes": "300Mi", "cpu_noise": 0.1}
apps.create_namespaced_deployment("demo", {
    "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
    "spec": {"replicas": 4, "selector": {"matchLabels": {"app": "web"}}, "template": {
        "metadata": {"labels": {"app": "web"}, "annotations": {"nodesim.podtailor.io/usage": json.dumps(usage)}},
        "spec": {"containers": [{"name": "app", "image": "registry.invalid/web:1",
                                 "resources": {"requests": {"cpu": "1", "memory": "1Gi"},
                                               "limits": {"memory": "2Gi"}}}]}}}})
deadline = time.monotonic() + 60
while True:
    pods = core.list_namespaced_pod("demo").items
    if len([p for p in pods if p.status.phase == "Running"]) == 4:
        break
    if time.monotonic() > deadline:
        raise SystemExit("sample pods did not start")
    time.sleep(0.5)
print("\nsample Deployment demo/web is running on simulated nodes:")
for p in pods:
    print(f"  {p.metadata.name:28} node {p.spec.node_name:14} requests {p.spec.containers[0].resources.requests}")
PYEOF

cat <<MSG

The local cluster stays up. Inspect it with the Python client or kubectl-compatible tools:
  export KUBECONFIG=$PWD/$DIR/admin.kubeconfig
  $PY -m tests.harness status
Prometheus scrapes the simulated nodes' cAdvisor and kube-state-metrics series (see the URL above).
Stop everything with:  make demo-down

The recommender and updater are not built yet: their end-to-end demo joins this script when they land.
MSG
