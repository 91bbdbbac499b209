package lessor

import "math"

// tokenBucket is the revocation budget: tokens accrue at rate per second up
// to burst, and it starts full. It counts in integers (token-nanoseconds),
// so the rate is exact on any clock, fake or real, however the calls fall.
// Times are nanoseconds on the Lessor's base; a time earlier than the last
// one seen adds nothing.
type tokenBucket struct {
	rate    int64 // tokens per second
	burst   int64
	tokens  int64
	partial int64 // token-nanoseconds toward the next token, < 1e9
	last    int64
	started bool
}

func newTokenBucket(rate, burst int) tokenBucket {
	return tokenBucket{rate: int64(rate), burst: int64(burst)}
}

// refill adds the tokens accrued up to now.
func (b *tokenBucket) refill(now int64) {
	if !b.started {
		b.tokens, b.last, b.started = b.burst, now, true
		return
	}
	if now <= b.last {
		return
	}
	elapsed := now - b.last
	b.last = now
	// Past the time to fill the bucket from empty, it is full; this also
	// keeps elapsed*rate from overflowing.
	if elapsed >= (b.burst+1)*1e9/b.rate+1 {
		b.tokens, b.partial = b.burst, 0
		return
	}
	acc := b.partial + elapsed*b.rate
	b.tokens += acc / 1e9
	b.partial = acc % 1e9
	if b.tokens >= b.burst {
		b.tokens, b.partial = b.burst, 0
	}
}

// available returns the whole tokens in the bucket at now.
func (b *tokenBucket) available(now int64) int {
	b.refill(now)
	return int(b.tokens)
}

// take spends n tokens; the caller asked available first.
func (b *tokenBucket) take(n int) { b.tokens -= int64(n) }

// when returns the earliest time, not before now, at which n tokens (at most
// burst) are in the bucket.
func (b *tokenBucket) when(now int64, n int) int64 {
	b.refill(now)
	need := min(int64(n), b.burst) - b.tokens
	if need <= 0 {
		return now
	}
	// The next token comes after 1e9-partial token-nanoseconds, and each
	// one after it after 1e9 more; round up to whole nanoseconds.
	tn := need*1e9 - b.partial
	wait := (tn + b.rate - 1) / b.rate
	if now > math.MaxInt64-wait {
		return math.MaxInt64
	}
	return now + wait
}
