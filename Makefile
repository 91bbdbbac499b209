# Developer targets. CI runs .ci/run, which does the same and more.

GO ?= go
# The budget of each fuzz target in `make fuzz`, as executions: a duration
# (such as 15s) can fail with "context deadline exceeded" and no crasher on
# Go 1.26 (go.dev/issue/75804). About 15 s each on a 2-core machine.
FUZZ_PROTOCOL ?= 400000x
FUZZ_SERVER ?= 15000x

# How long `make lincheck-long` runs.
LINCHECK_DURATION ?= 30m

.PHONY: test crash-long lincheck-long fuzz bench bench-full

# The README's test command.
test:
	$(GO) test -race ./...

# The crash test with 200 kill-and-restart cycles instead of 20. Replay a
# failure with the seed it logged: add -crash.seed=N.
crash-long:
	$(GO) test ./cmd/leased -run '^TestCrashKill$$' -count=1 -timeout 60m -crash.cycles=200 -v

# The linearizability checks, for LINCHECK_DURATION: histories of every
# fault kind in turn, then a summary of histories, operations, faults and
# violations. Replay one with the seed it logged: add -lincheck.seed=N.
lincheck-long:
	$(GO) test ./client -run '^TestLinearizableLong$$' -count=1 -timeout 0 -lincheck.duration=$(LINCHECK_DURATION) -v

# leasebench's quick run (about 70 s) and full sweep (about 6 minutes),
# with their files in leasebench-out/ (see docs/BENCHMARKS.md).
bench:
	$(GO) run ./cmd/leasebench
bench-full:
	$(GO) run ./cmd/leasebench --full

# Each fuzz target of packages protocol and server, as .ci/run does
# (FuzzSession minimizes new inputs with at most 200 runs, so that it has
# time to fuzz).
fuzz:
	for target in $$($(GO) test -list '^Fuzz' ./protocol/ | grep '^Fuzz'); do \
		$(GO) test ./protocol/ -run '^$$' -fuzz "^$${target}\$$" -fuzztime $(FUZZ_PROTOCOL) || exit 1; \
	done
	for target in $$($(GO) test -list '^Fuzz' ./server/ | grep '^Fuzz'); do \
		$(GO) test ./server/ -run '^$$' -fuzz "^$${target}\$$" -fuzztime $(FUZZ_SERVER) -fuzzminimizetime 200x || exit 1; \
	done
