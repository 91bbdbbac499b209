# Developer targets. CI runs .ci/run, which does the same and more.

GO ?= go
# The budget of each fuzz target in `make fuzz`, as executions: a duration
# (such as 15s) can fail with "context deadline exceeded" and no crasher on
# Go 1.26 (go.dev/issue/75804). About 15 s each on a 2-core machine.
FUZZ_PROTOCOL ?= 400000x
FUZZ_SERVER ?= 15000x
FUZZ_STORE ?= 300000x

# How long `make lincheck-long` and `make lincheck-cluster-long` run.
LINCHECK_DURATION ?= 30m

.PHONY: test crash-long crash-cluster-long lincheck-long lincheck-cluster-long fuzz bench bench-full cluster

# The README's test command.
test:
	$(GO) test -race -p 1 -timeout 30m ./...

# A three-node cluster on this machine (scripts/local-cluster.sh).
cluster:
	scripts/local-cluster.sh

# The crash test with 200 kill-and-restart cycles instead of 20. Replay a
# failure with the seed it logged: add -crash.seed=N.
crash-long:
	$(GO) test ./cmd/leased -run '^TestCrashKill$$' -count=1 -timeout 60m -crash.cycles=200 -v

# The cluster crash test with 100 kill-and-restart cycles instead of 5.
# Replay a failure with the seed it logged: add -crashcluster.seed=N.
crash-cluster-long:
	$(GO) test ./cmd/leased -run '^TestCrashCluster$$' -count=1 -timeout 60m -crashcluster.cycles=100 -v

# The linearizability checks, for LINCHECK_DURATION: histories of every
# fault kind in turn, then a summary of histories, operations, faults and
# violations. Replay one with the seed it logged: add -lincheck.seed=N.
lincheck-long:
	$(GO) test ./client -run '^TestLinearizableLong$$' -count=1 -timeout 0 -lincheck.duration=$(LINCHECK_DURATION) -v

# The same on a three-node cluster whose leader is killed, stopped, cut
# off or handed off, and whose followers restart.
lincheck-cluster-long:
	$(GO) test ./client -run '^TestLinearizableClusterLong$$' -count=1 -timeout 0 -lincheck.cluster.duration=$(LINCHECK_DURATION) -v

# leasebench's quick run (about 70 s) and full sweep (about 6 minutes),
# with their files in leasebench-out/ (see docs/BENCHMARKS.md).
bench:
	$(GO) run ./cmd/leasebench
bench-full:
	$(GO) run ./cmd/leasebench --full

# Each fuzz target of packages protocol, store and server, as .ci/run does
# (FuzzSession minimizes new inputs with at most 200 runs, so that it has
# time to fuzz).
fuzz:
	for target in $$($(GO) test -list '^Fuzz' ./protocol/ | grep '^Fuzz'); do \
		$(GO) test ./protocol/ -run '^$$' -fuzz "^$${target}\$$" -fuzztime $(FUZZ_PROTOCOL) || exit 1; \
	done
	for target in $$($(GO) test -list '^Fuzz' ./store/ | grep '^Fuzz'); do \
		$(GO) test ./store/ -run '^$$' -fuzz "^$${target}\$$" -fuzztime $(FUZZ_STORE) || exit 1; \
	done
	for target in $$($(GO) test -list '^Fuzz' ./server/ | grep '^Fuzz'); do \
		$(GO) test ./server/ -run '^$$' -fuzz "^$${target}\$$" -fuzztime $(FUZZ_SERVER) -fuzzminimizetime 200x || exit 1; \
	done
