#!/bin/sh
# The QUIC session floor's server: the bench binary in -mode quicfloor-server (a bare quic-go server
# with leased's memory-relevant settings, see floor.go) on UDP 127.0.0.1:7480. It writes its
# self-signed certificate to /tmp/peerbase/quicfloor-cert.pem once it listens (removed here first:
# wait for it). Log /tmp/peerbase/quicfloor.log, pid /tmp/peerbase/quicfloor.pid.
# Binary: /tmp/peerbase/bin/bench, built by build.sh (run_all.sh runs it). Extra bench flags are passed through.
rm -f /tmp/peerbase/quicfloor-cert.pem
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"
nohup /tmp/peerbase/bin/bench -mode quicfloor-server -listen 127.0.0.1:7480 \
  -quiccert /tmp/peerbase/quicfloor-cert.pem "$@" \
  > /tmp/peerbase/quicfloor.log 2>&1 < /dev/null &
echo $! > /tmp/peerbase/quicfloor.pid
