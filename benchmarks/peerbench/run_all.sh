#!/bin/sh
# Full baseline run, in this order: etcd (1 node), etcd (3 nodes), redis (non-durable, durable),
# leased, the floors (cached reads, idle QUIC sessions), leased (3 nodes), fsync. About 18-23 min with
# the defaults (3 x 5 s runs per test). Run it alone on the machine.
# Extra bench flags via BENCHFLAGS (they come before the per-step flags), e.g. a smoke run:
#   BENCHFLAGS="-dur 1s -runs 1 -prewarm 1s -puts 20 -memleases 100000 -sessions 1000" ./run_all.sh
# Results go to $OUTDIR (default /tmp/peerbase/results/<timestamp>): <step>.txt (log, SUMMARY lines),
# <step>.jsonl (one JSON object per test), env.txt (versions), leased*.log, quicfloor.log (server logs).
# Builds the bench and leased + leasectl from the leased checkout $LEASED_SRC (default: the repository
# this folder is in) into /tmp/peerbase with build.sh; the bench gets the quic-go version that leased
# builds with (its QUIC floor must measure the same quic-go). Every server is started by a start_*.sh
# script and stopped by its pid. Installs etcd and redis with apt-get when they are missing.
set -e
HERE=$(cd "$(dirname "$0")" && pwd)
LEASED_SRC=$(cd "${LEASED_SRC:-$HERE/../..}" && pwd)
export LEASED_SRC
GO=${GO:-go}
P=/tmp/peerbase
mkdir -p $P/bin
OUTDIR=${OUTDIR:-$P/results/$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUTDIR"
if ! command -v etcd >/dev/null || ! command -v redis-server >/dev/null; then
  apt-get update -qq && apt-get install -y -qq etcd-server etcd-client redis-server >/dev/null
fi
B=$P/bin/bench
QUICGO=$("$HERE/build.sh")
cd $P
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"

# Pid files of this run only: a stale one from an earlier run is forgotten, never killed.
PIDFILES="etcd.pid etcd3-1.pid etcd3-2.pid etcd3-3.pid redis.pid leased.pid quicfloor.pid leased3-1.pid leased3-2.pid leased3-3.pid"
rm -f $PIDFILES
stop() { "$HERE/stop_pid.sh" "$1" && rm -f "$1"; }
cleanup() { for f in $PIDFILES; do [ -f "$f" ] && stop "$f"; done; true; }
trap cleanup EXIT
trap 'exit 130' INT TERM
step() { echo "== $(date +%H:%M:%S) $*"; }

{
  date; uname -a; nproc; free -m | head -2; $GO version
  etcd --version | head -1; redis-server --version
  echo "leased: $(git -C "$LEASED_SRC" rev-parse HEAD 2>/dev/null) $(git -C "$LEASED_SRC" status --short 2>/dev/null | wc -l) changed files"
  echo "quic-go (leased's, and the bench's): $QUICGO"
  echo "ulimit -n $(ulimit -n)"; echo "BENCHFLAGS=$BENCHFLAGS"
} > "$OUTDIR/env.txt" 2>&1

step "etcd, 1 node"
"$HERE/start_etcd.sh"; sleep 3
ETCDCTL_API=3 etcdctl --endpoints=127.0.0.1:23790 endpoint health
$B -mode etcd -pid $(cat etcd.pid) -json $OUTDIR/etcd.jsonl $BENCHFLAGS > $OUTDIR/etcd.txt 2>&1 || true
$B -mode etcd -pid $(cat etcd.pid) -json $OUTDIR/etcd.jsonl $BENCHFLAGS -only put.watchers -watchers 1 -prewarm 0 \
  > $OUTDIR/etcd.watchers1.txt 2>&1 || true
stop etcd.pid

step "etcd, 3 nodes"
"$HERE/start_etcd3.sh"
EP3=127.0.0.1:23791,127.0.0.1:23792,127.0.0.1:23793
for i in $(seq 30); do ETCDCTL_API=3 etcdctl --endpoints=$EP3 endpoint health > /dev/null 2>&1 && break; sleep 1; done
ETCDCTL_API=3 etcdctl --endpoints=$EP3 endpoint health
ETCDCTL_API=3 etcdctl --endpoints=$EP3 endpoint status | tee $OUTDIR/etcd3.status.txt
# the client talks to the leader; srvCPU% is the sum of the three members
LEADER=$(awk -F', ' '$5=="true"{print $1}' $OUTDIR/etcd3.status.txt)
L=${LEADER##*:2379}
OTHERS=$(for i in 1 2 3; do [ "$i" = "$L" ] || printf '%s,' "$(cat etcd3-$i.pid)"; done)
$B -mode etcd -etcd $LEADER -pid $(cat etcd3-$L.pid) -pids "$OTHERS" -label 3node -json $OUTDIR/etcd3.jsonl $BENCHFLAGS \
  -only etcd.put.seq,etcd.put.c,etcd.get.linearizable.seq > $OUTDIR/etcd3.txt 2>&1 || true
for i in 1 2 3; do stop etcd3-$i.pid; done

for cfg in nondurable durable; do
  step "redis $cfg"
  "$HERE/start_redis.sh" $cfg; sleep 1
  redis-cli -p 6390 ping
  $B -mode redis -pid $(cat redis.pid) -label $cfg -json $OUTDIR/redis.jsonl $BENCHFLAGS > $OUTDIR/redis.$cfg.txt 2>&1 || true
  $B -mode redis -pid $(cat redis.pid) -label $cfg -json $OUTDIR/redis.jsonl $BENCHFLAGS -only inval -watchers 1 -prewarm 0 \
    > $OUTDIR/redis.$cfg.watchers1.txt 2>&1 || true
  stop redis.pid
done

# leased: the main tests on one server; the memory and the sessions test each on a fresh one.
start_leased() {
  "$HERE/start_leased.sh" "$@"
  for i in $(seq 40); do
    $P/leasectl --endpoint 127.0.0.1:7490 --cacert $P/leased-data/tls/ca.pem status > /dev/null 2>&1 && break
    sleep 0.5
  done
  $P/leasectl --endpoint 127.0.0.1:7490 --cacert $P/leased-data/tls/ca.pem status
}
step "leased"
start_leased
$B -mode leased -pid $(cat leased.pid) -json $OUTDIR/leased.jsonl $BENCHFLAGS -skip leased.mem,leased.sessions \
  > $OUTDIR/leased.txt 2>&1 || true
stop leased.pid; cp leased.log $OUTDIR/leased.main.log
step "leased memory"
start_leased --term /long/=10m
$B -mode leased -pid $(cat leased.pid) -json $OUTDIR/leased.jsonl $BENCHFLAGS -only leased.mem \
  > $OUTDIR/leased.mem.txt 2>&1 || true
stop leased.pid; cp leased.log $OUTDIR/leased.mem.log
step "leased sessions"
start_leased
$B -mode leased -pid $(cat leased.pid) -json $OUTDIR/leased.jsonl $BENCHFLAGS -only leased.sessions \
  > $OUTDIR/leased.sessions.txt 2>&1 || true
stop leased.pid; cp leased.log $OUTDIR/leased.sessions.log

# The floors leased's figures are compared with: cached reads (no server) and idle QUIC sessions
# (a bare quic-go server with leased's settings, the bench binary itself; fresh, like leased's).
step "floor: cached reads"
$B -mode floor -json $OUTDIR/floor.jsonl $BENCHFLAGS > $OUTDIR/floor.txt 2>&1 || true
step "floor: QUIC sessions"
"$HERE/start_quicfloor.sh"
for i in $(seq 40); do [ -s quicfloor-cert.pem ] && break; sleep 0.25; done
$B -mode quicfloor -pid $(cat quicfloor.pid) -json $OUTDIR/quicfloor.jsonl $BENCHFLAGS > $OUTDIR/quicfloor.txt 2>&1 || true
stop quicfloor.pid; cp quicfloor.log $OUTDIR/quicfloor.log

step "leased, 3 nodes"
"$HERE/start_leased3.sh"
EPL=127.0.0.1:7491,127.0.0.1:7492,127.0.0.1:7493
CA3=$P/leased3-ca/ca.pem
for i in $(seq 40); do $P/leasectl --endpoints $EPL --cacert $CA3 endpoint health > /dev/null 2>&1 && break; sleep 0.5; done
$P/leasectl --endpoints $EPL --cacert $CA3 endpoint health
$P/leasectl --endpoints $EPL --cacert $CA3 endpoint status | tee $OUTDIR/leased3.status.txt
# the client is given every node and finds the leader; srvCPU% is the sum of the three nodes
LEADER=$(awk '$5=="leader"{print $1}' $OUTDIR/leased3.status.txt)
L=${LEADER##*:749}
OTHERS=$(for i in 1 2 3; do [ "$i" = "$L" ] || printf '%s,' "$(cat leased3-$i.pid)"; done)
$B -mode leased -leased $EPL -leasedca $CA3 -pid $(cat leased3-$L.pid) -pids "$OTHERS" -label 3node -json $OUTDIR/leased3.jsonl \
  $BENCHFLAGS -only leased.put.seq,leased.put.c > $OUTDIR/leased3.txt 2>&1 || true
for i in 1 2 3; do stop leased3-$i.pid; cp leased3-$i.log $OUTDIR/leased3.n$i.log; done

step "fsync"
$B -mode fsync -json $OUTDIR/fsync.jsonl $BENCHFLAGS > $OUTDIR/fsync.txt 2>&1 || true
step "done: $OUTDIR"
grep -h SUMMARY $OUTDIR/*.txt
grep -h "WARN\|FATAL" $OUTDIR/*.txt || true
