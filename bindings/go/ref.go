package eventq

import "sync/atomic"

// refGuard counts the users of a C handle, so the handle is freed exactly
// once and never while a call that uses it is in flight, whatever the Go
// caller does concurrently (Release during a Recv, Remove during SetEnabled,
// Close during Run).
//
// The count starts at 1: the owner's reference. Every call that uses the
// handle takes a reference with acquire and gives it back with release.
// close marks the guard closed (acquire fails from then on) and hands the
// owner's reference to its caller, who releases it after its last use. The
// release that brings a closed guard to zero references reports it: that
// caller frees the handle.
type refGuard struct{ v atomic.Int64 }

const refClosed = int64(1) << 62

func (g *refGuard) init() { g.v.Store(1) }

// acquire takes a reference; false once the guard is closed.
func (g *refGuard) acquire() bool {
	for {
		v := g.v.Load()
		if v&refClosed != 0 {
			return false
		}
		if g.v.CompareAndSwap(v, v+1) {
			return true
		}
	}
}

// release gives back a reference; true when the caller must free the handle.
func (g *refGuard) release() bool {
	return g.v.Add(-1) == refClosed
}

// close marks the guard closed; true for the one caller that closed it, who
// now holds the owner's reference and must release it.
func (g *refGuard) close() bool {
	for {
		v := g.v.Load()
		if v&refClosed != 0 {
			return false
		}
		if g.v.CompareAndSwap(v, v|refClosed) {
			return true
		}
	}
}

// closed reports whether close was called.
func (g *refGuard) closed() bool { return g.v.Load()&refClosed != 0 }
