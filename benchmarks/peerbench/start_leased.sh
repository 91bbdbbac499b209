#!/bin/sh
# leased on loopback (UDP 127.0.0.1:7490), fresh data folder /tmp/peerbase/leased-data.
# Default term (10s) and epsilon (100ms); keys under /nc/ are never cached (term 0).
# Extra leased flags are passed through, e.g. the memory test's:  start_leased.sh --term /long/=10m
# Binary: /tmp/peerbase/leased, built by build.sh (run_all.sh runs it).
rm -rf /tmp/peerbase/leased-data
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"
nohup /tmp/peerbase/leased --data /tmp/peerbase/leased-data --listen 127.0.0.1:7490 \
  --term /nc/=0 --max-sessions 100000 --max-sessions-per-addr 100000 "$@" \
  > /tmp/peerbase/leased.log 2>&1 < /dev/null &
echo $! > /tmp/peerbase/leased.pid
