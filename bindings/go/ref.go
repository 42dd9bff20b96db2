// SPDX-License-Identifier: MIT OR Apache-2.0
//go:build linux

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

// Which of a splitRef's two counters a call takes its reference from.
const (
	refSend  = 0 // the sending calls (Send, TrySend, SendBatch, SendPacked)
	refOther = 1 // everything else
)

// splitRef is a refGuard split in two counters, each on its own cache
// lines: a producer and a consumer calling at the same time on two cores
// then each update their own counter instead of bouncing one cache line
// between the cores on every call. Each counter works as a refGuard and
// starts with its share of the owner's reference; the handle is freed by
// the release that drains the second of the two once both are closed.
type splitRef struct {
	_      [64]byte
	shards [2]struct {
		refGuard
		_ [120]byte
	}
	live atomic.Int32 // shards not yet closed and drained
}

func (g *splitRef) init() {
	g.shards[0].init()
	g.shards[1].init()
	g.live.Store(2)
}

// acquire takes a reference from shard s; false once the guard is closed.
func (g *splitRef) acquire(s int) bool { return g.shards[s].acquire() }

// release gives back a reference to shard s; true when the caller must
// free the handle.
func (g *splitRef) release(s int) bool {
	return g.shards[s].release() && g.live.Add(-1) == 0
}

// close marks the guard closed; true for the one caller that closed it,
// who must then call releaseOwner after its last use.
func (g *splitRef) close() bool {
	if !g.shards[0].close() {
		return false
	}
	// Only the caller that closed shard 0 gets here.
	g.shards[1].close()
	return true
}

// releaseOwner gives back the owner's reference (both shares); true when
// the caller must free the handle.
func (g *splitRef) releaseOwner() bool {
	a := g.release(0)
	b := g.release(1)
	return a || b
}

// closed reports whether close was called.
func (g *splitRef) closed() bool { return g.shards[0].closed() }
