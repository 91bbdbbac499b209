#!/bin/sh
# 3-node leased cluster on loopback (raft: leased's defaults, heartbeat/election 200 ms).
# Node i (1..3): name n$i, clients on UDP 127.0.0.1:749$i, peers on TCP 127.0.0.1:1749$i,
# fresh data /tmp/peerbase/leased3-$i, log /tmp/peerbase/leased3-$i.log, pid /tmp/peerbase/leased3-$i.pid.
# One shared development CA (leased cert create-ca) in /tmp/peerbase/leased3-ca: each node issues its
# own node certificate from it on first start; clients trust /tmp/peerbase/leased3-ca/ca.pem (on
# loopback the nodes ask no client certificate). Same server flags as start_leased.sh; extra leased
# flags are passed through to every node. Binary: /tmp/peerbase/leased, built by build.sh (run_all.sh runs it).
set -e
P=/tmp/peerbase
rm -rf $P/leased3-ca $P/leased3-1 $P/leased3-2 $P/leased3-3
$P/leased cert create-ca --dir $P/leased3-ca > /dev/null
C=n1=127.0.0.1:17491,n2=127.0.0.1:17492,n3=127.0.0.1:17493
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"
for i in 1 2 3; do
  nohup $P/leased --name n$i --data $P/leased3-$i --listen 127.0.0.1:749$i --peer-listen 127.0.0.1:1749$i \
    --initial-cluster $C --ca-dir $P/leased3-ca \
    --term /nc/=0 --max-sessions 100000 --max-sessions-per-addr 100000 "$@" \
    > $P/leased3-$i.log 2>&1 < /dev/null &
  echo $! > $P/leased3-$i.pid
done
