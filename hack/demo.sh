#!/usr/bin/env bash
# The main job, on one machine: start the local Kubernetes (pods run as local processes),
# run the operator, create the sample 3-member EtcdCluster (TLS with client certificates and
# a NetworkPolicy, the secure default), wait until it is Available, write and read a key
# through the cluster with a client certificate signed by the cluster's CA, upgrade it to etcd 3.7.3 (followers first, the
# leader last after a hand-over) and read the key again, back it up onto a claim and restore
# that backup into a new cluster, print the members and how long each step took, then shut
# everything down. KEEP=1 keeps the cluster running (stop it with
# `bin/etcd-pilot-local down`).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
dir=${DIR:-.local}
local_bin=bin/etcd-pilot-local
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
"$root/hack/build-etcd.sh" 3.7.3 >/dev/null
step "build what was missing"

log="$dir.up.log"
mkdir -p "$(dirname "$log")"
"$local_bin" up --dir "$dir" >"$log" 2>&1 &
up_pid=$!
cleanup() {
  if [ "${KEEP:-0}" = 1 ]; then
    echo "the local cluster keeps running (KEEP=1): $local_bin exec --dir $dir -- kubectl get etcdc,pods -A; stop it with: $local_bin down --dir $dir"
    return
  fi
  "$local_bin" down --dir "$dir" >/dev/null 2>&1 || kill "$up_pid" 2>/dev/null || true
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

x() { "$local_bin" exec --dir "$dir" -- "$@"; }
certs=$(mkdir -p "$dir/certs" && cd "$dir/certs" && pwd)
# client_cert CLUSTER: the demo's client certificate for CLUSTER, which the operator issues
# on request (spec.tls.client.certificates: [{name: app}] into the Secret <name>-client-app):
# a cluster is secure by default (TLS with client-certificate authentication), so etcdctl
# needs one, and nobody needs the CA's key for it.
client_cert() {
  local d="$certs/$1"
  mkdir -p "$d"
  local secret="$1-client-app"
  local deadline=$(( $(date +%s) + 60 ))
  until x kubectl get secret "$secret" -n "$ns" >/dev/null 2>&1; do
    if [ "$(date +%s)" -gt "$deadline" ]; then echo "Secret $secret did not appear within 60s"; exit 1; fi
    sleep 0.5
  done
  x kubectl get secret "$secret" -n "$ns" -o jsonpath='{.data.ca\.crt}' | base64 -d >"$d/ca.crt"
  x kubectl get secret "$secret" -n "$ns" -o jsonpath='{.data.tls\.crt}' | base64 -d >"$d/client.crt"
  x kubectl get secret "$secret" -n "$ns" -o jsonpath='{.data.tls\.key}' | base64 -d >"$d/client.key"
}
# etcdctl_of CLUSTER ARGS...: etcdctl with the demo's client certificate for CLUSTER.
etcdctl_of() {
  local d="$certs/$1"
  shift
  x etcdctl --cacert "$d/ca.crt" --cert "$d/client.crt" --key "$d/client.key" "$@"
}
x kubectl apply -f "$sample" >/dev/null
x kubectl wait --for=condition=Available --timeout=180s "etcdcluster/$name" -n "$ns" >/dev/null
client_cert "$name"
step "apply $sample (TLS by default), wait for Available"

eps=$(x kubectl get etcdcluster "$name" -n "$ns" -o jsonpath='{range .status.members[*]}{.clientURL}{","}{end}')
eps=${eps%,}
etcdctl_of "$name" --endpoints "$eps" put /demo/greeting "hello from etcd-pilot" >/dev/null
value=$(etcdctl_of "$name" --endpoints "$eps" get /demo/greeting --print-value-only)
[ "$value" = "hello from etcd-pilot" ] || { echo "read back '$value'"; exit 1; }
step "write and read /demo/greeting"

changes_before=$(x kubectl get etcdcluster "$name" -n "$ns" -o jsonpath='{.status.leaderChanges}')
x kubectl patch etcdcluster "$name" -n "$ns" --type merge -p '{"spec":{"version":"3.7.3"}}' >/dev/null
deadline=$(( $(date +%s) + 180 ))
until [ "$(x kubectl get etcdcluster "$name" -n "$ns" -o jsonpath='{.status.currentVersion}/{.status.clusterVersion}/{.status.upgrade.stepVersion}/{.status.conditions[?(@.type=="Ready")].status}')" = "3.7.3/3.7.0//True" ]; do
  if [ "$(date +%s)" -gt "$deadline" ]; then
    echo "the upgrade to 3.7.3 did not finish within 180s:"; x kubectl get etcdcluster "$name" -n "$ns" -o yaml; exit 1
  fi
  sleep 0.5
done
changes_after=$(x kubectl get etcdcluster "$name" -n "$ns" -o jsonpath='{.status.leaderChanges}')
value=$(etcdctl_of "$name" --endpoints "$eps" get /demo/greeting --print-value-only)
[ "$value" = "hello from etcd-pilot" ] || { echo "read back '$value' after the upgrade"; exit 1; }
step "upgrade to etcd 3.7.3, read /demo/greeting again"

# A backup onto a claim, restored into a new cluster (spec.bootstrap): the key is there too.
cat >"$dir/restore-demo.yaml" <<EOF
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: demo-backups, namespace: $ns}
spec:
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 1Gi}}
---
apiVersion: etcdpilot.io/v1alpha1
kind: EtcdBackup
metadata: {name: $name-by-hand, namespace: $ns}
spec:
  clusterName: $name
  destination: {persistentVolumeClaim: {claimName: demo-backups}}
EOF
x kubectl apply -f "$dir/restore-demo.yaml" >/dev/null
x kubectl wait --for=jsonpath='{.status.phase}'=Succeeded --timeout=120s "etcdbackup/$name-by-hand" -n "$ns" >/dev/null
backup_rev=$(x kubectl get etcdbackup "$name-by-hand" -n "$ns" -o jsonpath='{.status.revision}')
cat >"$dir/restored.yaml" <<EOF
apiVersion: etcdpilot.io/v1alpha1
kind: EtcdCluster
metadata: {name: $name-restored, namespace: $ns}
spec:
  replicas: 3
  version: "3.7.3"
  bootstrap: {fromBackup: {name: $name-by-hand}}
  tls: {client: {certificates: [{name: app}]}}
EOF
x kubectl apply -f "$dir/restored.yaml" >/dev/null
x kubectl wait --for=condition=Available --timeout=180s "etcdcluster/$name-restored" -n "$ns" >/dev/null
client_cert "$name-restored"
reps=$(x kubectl get etcdcluster "$name-restored" -n "$ns" -o jsonpath='{range .status.members[*]}{.clientURL}{","}{end}')
reps=${reps%,}
restored=$(etcdctl_of "$name-restored" --endpoints "$reps" get /demo/greeting --print-value-only)
[ "$restored" = "hello from etcd-pilot" ] || { echo "read back '$restored' from the restored cluster"; exit 1; }
step "back up onto a claim, restore into $name-restored, read it"

echo
x kubectl get etcdcluster -n "$ns"
echo
{
  echo "MEMBER ID LEADER VERSION HEALTHY DB-BYTES"
  x kubectl get etcdcluster "$name" -n "$ns" -o jsonpath='{range .status.members[*]}{.name}{" "}{.id}{" "}{.leader}{" "}{.version}{" "}{.healthy}{" "}{.dbSizeBytes}{"\n"}{end}' | sed 's/  / false /'
} | column -t
echo "read /demo/greeting after the upgrade: $value"
echo "leader changes during the upgrade: $(( ${changes_after:-0} - ${changes_before:-0} )) (the hand-over before the old leader restarted)"
echo "restored $name-restored from backup $name-by-hand (revision $backup_rev): /demo/greeting reads '$restored'"
echo
printf '%s\n' "${steps[@]}"
