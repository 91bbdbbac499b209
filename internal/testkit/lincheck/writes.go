package lincheck

// A watch's checker needs the writes of a history: which values were put,
// with what outcome, and at which revision those that took effect did.

// KeyValue is a put of Value to Key.
type KeyValue struct{ Key, Value string }

// Written is what became of a put: the outcome of its operation, and, for
// OK, the revision it took effect at.
type Written struct {
	Outcome  Outcome
	Revision uint64
}

// Writes returns the puts of the recorded operations (Put, CAS, FencedPut,
// LeasePut, and the puts of a Txn, of either branch): every value written
// in a history is unique, but a Txn may put one value to several keys. A
// Txn's put is OK at the Txn's revision only if the Txn was OK and applied
// the put's branch; a put of the branch it did not apply is NoEffect (if
// the other branch does not put it too); an unknown Txn's puts are
// Unknown.
func (r *Recorder) Writes() map[KeyValue]Written {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[KeyValue]Written)
	for _, op := range r.ops {
		in, o := op.Input.(Input), op.Output.(Output)
		switch in.Kind {
		case Put, CAS, FencedPut, LeasePut:
			out[KeyValue{in.Key, in.Value}] = Written{Outcome: o.Outcome, Revision: o.Version}
		case Txn:
			for i, branch := range [2][]TxnOp{in.Then, in.Else} {
				for _, t := range branch {
					if t.Delete {
						continue
					}
					p := KeyValue{t.Key, t.Value}
					w := Written{Outcome: o.Outcome}
					switch {
					case o.Outcome == OK && o.Succeeded == (i == 0):
						w.Revision = o.Version
					case o.Outcome == OK:
						if _, ok := out[p]; ok {
							continue // the applied branch puts it too
						}
						w.Outcome = NoEffect
					}
					out[p] = w
				}
			}
		}
	}
	return out
}
