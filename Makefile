# Developer targets. CI runs .ci/run, which does the same and more.

GO ?= go
# How long each fuzz target runs in `make fuzz`.
FUZZTIME ?= 15s

.PHONY: test crash-long fuzz

# The README's test command.
test:
	$(GO) test -race ./...

# The crash test with 200 kill-and-restart cycles instead of 20. Replay a
# failure with the seed it logged: add -crash.seed=N.
crash-long:
	$(GO) test ./cmd/leased -run '^TestCrashKill$$' -count=1 -timeout 60m -crash.cycles=200 -v

# Each fuzz target of packages protocol and server for FUZZTIME, as
# .ci/run does (FuzzSession minimizes new inputs with at most 200 runs, so
# that it has time to fuzz).
fuzz:
	for pkg in ./protocol/ ./server/; do \
		for target in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz'); do \
			$(GO) test $$pkg -run '^$$' -fuzz "^$${target}\$$" -fuzztime $(FUZZTIME) -fuzzminimizetime 200x || exit 1; \
		done; \
	done
