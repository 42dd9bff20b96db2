// SPDX-License-Identifier: MIT OR Apache-2.0
//go:build linux

package eventq

import (
	"sync"
	"sync/atomic"
	"testing"
)

// splitRef frees exactly once, after the last reference of either shard,
// and never while a reference is held.
func TestSplitRef(t *testing.T) {
	var g splitRef
	g.init()
	if !g.acquire(refSend) || !g.acquire(refOther) {
		t.Fatal("acquire on an open guard failed")
	}
	if !g.close() {
		t.Fatal("first close")
	}
	if g.close() || !g.closed() {
		t.Fatal("second close, or not closed")
	}
	if g.acquire(refSend) || g.acquire(refOther) {
		t.Fatal("acquire after close succeeded")
	}
	if g.releaseOwner() {
		t.Fatal("freed with two references held")
	}
	if g.release(refSend) {
		t.Fatal("freed with one reference held")
	}
	if !g.release(refOther) {
		t.Fatal("last release did not free")
	}

	// Under contention: many goroutines on both shards, one close.
	for round := 0; round < 50; round++ {
		var g splitRef
		g.init()
		var frees, inUse atomic.Int64
		var wg sync.WaitGroup
		for i := 0; i < 8; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					if !g.acquire(i % 2) {
						return
					}
					inUse.Add(1)
					if frees.Load() != 0 {
						t.Error("freed while in use")
					}
					inUse.Add(-1)
					if g.release(i % 2) {
						frees.Add(1)
					}
				}
			}()
		}
		if g.close() && g.releaseOwner() {
			frees.Add(1)
		}
		wg.Wait()
		if frees.Load() != 1 {
			t.Fatalf("round %d: freed %d times", round, frees.Load())
		}
	}
}
