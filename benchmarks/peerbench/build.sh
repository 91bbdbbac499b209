#!/bin/sh
# Builds the bench (this folder's Go module) into /tmp/peerbase/bin/bench, and leased and leasectl
# from $LEASED_SRC (default: the repository this folder is in) into /tmp/peerbase. run_all.sh calls it;
# run it alone before running a step by hand. Nothing is written in the work tree.
# The bench is built against $LEASED_SRC with the quic-go version leased builds with (its QUIC floor
# must measure the same quic-go): in place when $LEASED_SRC is this repository (go.mod's replace points
# there; a different quic-go version is an error: update go.mod), else from a copy of go.mod in
# /tmp/peerbase pointed at $LEASED_SRC. Prints that quic-go version.
set -e
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
LEASED_SRC=$(cd "${LEASED_SRC:-$ROOT}" && pwd)
GO=${GO:-go}
P=/tmp/peerbase
mkdir -p $P/bin
QUICGO=$(cd "$LEASED_SRC" && $GO list -m -f '{{.Version}}' github.com/quic-go/quic-go)
cd "$HERE"
if [ "$LEASED_SRC" = "$ROOT" ]; then
  BENCHQUIC=$($GO list -m -f '{{.Version}}' github.com/quic-go/quic-go)
  if [ "$BENCHQUIC" != "$QUICGO" ]; then
    echo "build.sh: the bench builds with quic-go $BENCHQUIC, leased with $QUICGO;" \
      "run 'go get github.com/quic-go/quic-go@$QUICGO && go mod tidy' in $HERE" >&2
    exit 1
  fi
  $GO build -o $P/bin/bench .
else
  cp go.mod $P/bench.mod
  cp go.sum $P/bench.sum
  $GO mod edit -replace github.com/leased/leased="$LEASED_SRC" -require github.com/quic-go/quic-go@$QUICGO $P/bench.mod
  $GO build -mod=mod -modfile $P/bench.mod -o $P/bin/bench .
fi
(cd "$LEASED_SRC" && $GO build -o $P/leased ./cmd/leased && $GO build -o $P/leasectl ./cmd/leasectl)
echo "$QUICGO"
