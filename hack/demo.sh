#!/usr/bin/env bash
# The main job, on one machine: start the local Kubernetes (pods run as local processes),
# run the operator, create the sample 3-member EtcdCluster, wait until it is Available,
# write and read a key through the cluster, print the members and how long each step took,
# then shut everything down. KEEP=1 keeps the cluster running (stop it with
# `bin/etcd-pilot local down`).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
dir=${DIR:-.local}
pilot=bin/etcd-pilot
sample=config/samples/etcdcluster.yaml
name=$(awk '/^  name:/ {print $2; exit}' "$sample")
ns=$(awk '/^  namespace:/ {print $2; exit}' "$sample")

now() { date +%s.%N; }
declare -a steps=()
step_start=$(now)
step() { # step "what": records the time since the previous step
  local t; t=$(now)
  steps+=("$(awk -v a="$step_start" -v b="$t" -v s="$1" 'BEGIN { printf "%-58s %6.1fs", s, b - a }')")
  step_start=$t
}

"$root/hack/build-kube.sh" >/dev/null
"$root/hack/build-etcd.sh" >/dev/null
step "build what was missing"

log="$dir.up.log"
mkdir -p "$(dirname "$log")"
"$pilot" local up --dir "$dir" >"$log" 2>&1 &
up_pid=$!
cleanup() {
  if [ "${KEEP:-0}" = 1 ]; then
    echo "the local cluster keeps running (KEEP=1): $pilot local exec --dir $dir -- kubectl get etcdc,pods -A; stop it with: $pilot local down --dir $dir"
    return
  fi
  "$pilot" local down --dir "$dir" >/dev/null 2>&1 || kill "$up_pid" 2>/dev/null || true
  wait "$up_pid" 2>/dev/null || true
}
trap cleanup EXIT
until grep -q "ready" "$log" 2>/dev/null; do
  if ! kill -0 "$up_pid" 2>/dev/null; then
    echo "local up failed:"; cat "$log"; exit 1
  fi
  sleep 0.2
done
grep "ready" "$log"
step "start the local cluster"

x() { "$pilot" local exec --dir "$dir" -- "$@"; }
x kubectl apply -f "$sample" >/dev/null
x kubectl wait --for=condition=Available --timeout=180s "etcdcluster/$name" -n "$ns" >/dev/null
step "apply $sample, wait for Available"

eps=$(x kubectl get etcdcluster "$name" -n "$ns" -o jsonpath='{range .status.members[*]}{.clientURL}{","}{end}')
eps=${eps%,}
x etcdctl --endpoints "$eps" put /demo/greeting "hello from etcd-pilot" >/dev/null
value=$(x etcdctl --endpoints "$eps" get /demo/greeting --print-value-only)
[ "$value" = "hello from etcd-pilot" ] || { echo "read back '$value'"; exit 1; }
step "write and read /demo/greeting"

echo
x kubectl get etcdcluster "$name" -n "$ns"
echo
{
  echo "MEMBER ID LEADER VERSION HEALTHY DB-BYTES"
  x kubectl get etcdcluster "$name" -n "$ns" -o jsonpath='{range .status.members[*]}{.name}{" "}{.id}{" "}{.leader}{" "}{.version}{" "}{.healthy}{" "}{.dbSizeBytes}{"\n"}{end}' | sed 's/  / false /'
} | column -t
echo "read /demo/greeting: $value"
echo
printf '%s\n' "${steps[@]}"
