#!/usr/bin/env bash
# Runs a three-node leased cluster on this machine, for trying out failover:
# clients on 127.0.0.1:7401-7403, peers on 127.0.0.1:7501-7503, data under
# ./cluster-data (a CA in cluster-data/ca, one data folder per node, each
# node's log in cluster-data/nN.log and its process id in
# cluster-data/nN.pid). Ctrl-C stops the nodes; running it again starts them
# on the data they left.
#
#   make cluster              # or: scripts/local-cluster.sh
#   bin/leasectl --endpoints 127.0.0.1:7401,127.0.0.1:7402,127.0.0.1:7403 \
#       --cacert cluster-data/ca/ca.pem put k v
set -euo pipefail
cd "$(dirname "$0")/.."

root=${CLUSTER_DATA:-cluster-data}
mkdir -p bin "$root"
go build -o bin/ ./cmd/leased ./cmd/leasectl

if [ ! -f "$root/ca/ca.pem" ]; then
	bin/leased cert create-ca --dir "$root/ca"
fi

initial=n1=127.0.0.1:7501,n2=127.0.0.1:7502,n3=127.0.0.1:7503
pids=()
stop() {
	kill -TERM "${pids[@]}" 2>/dev/null || true
	wait "${pids[@]}" 2>/dev/null || true
}
trap stop EXIT INT TERM
for i in 1 2 3; do
	bin/leased --name "n$i" --listen "127.0.0.1:740$i" --peer-listen "127.0.0.1:750$i" \
		--initial-cluster "$initial" --ca-dir "$root/ca" --data "$root/n$i" \
		>"$root/n$i.log" 2>&1 &
	pids+=($!)
	echo $! >"$root/n$i.pid"
done
echo "nodes n1 n2 n3 on 127.0.0.1:7401-7403 (logs in $root/n*.log); Ctrl-C stops them"
echo "try: bin/leasectl --endpoints 127.0.0.1:7401,127.0.0.1:7402,127.0.0.1:7403 --cacert $root/ca/ca.pem put k v"
wait "${pids[@]}"
