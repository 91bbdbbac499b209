package client

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

// TestUnknownOutcomeNotCanceled: a write whose last copy was abandoned
// after an earlier copy was sent may have committed, so its error wraps
// ErrUnavailable and never ErrCanceled, which tells a caller that nothing
// changed (the linearizability check took such a write for one without
// effect, and found the value it wrote read later); the context's error
// stays visible.
func TestUnknownOutcomeNotCanceled(t *testing.T) {
	for _, cause := range []error{context.Canceled, context.DeadlineExceeded, errors.New("the server abandoned it")} {
		abandoned := fmt.Errorf("%w: %w", ErrCanceled, cause)
		err := unknownOutcome(abandoned)
		if errors.Is(err, ErrCanceled) || !errors.Is(err, ErrUnavailable) {
			t.Errorf("unknownOutcome(%v) = %v: want ErrUnavailable, not ErrCanceled", abandoned, err)
		}
		if ctxErr := errors.Is(cause, context.Canceled) || errors.Is(cause, context.DeadlineExceeded); ctxErr && !errors.Is(err, cause) {
			t.Errorf("unknownOutcome(%v) = %v: want it to wrap %v", abandoned, err, cause)
		}
	}
}
