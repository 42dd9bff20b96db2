// SPDX-License-Identifier: MIT OR Apache-2.0
//go:build linux

package eventq

import "unsafe"

// SetLoopFreedHook makes fn run each time the cleanup of a dropped Loop
// is about to free it, with the LoopID of the loop; nil removes it.
func SetLoopFreedHook(fn func(id uintptr)) {
	if fn == nil {
		loopFreedHook.Store(nil)
		return
	}
	loopFreedHook.Store(&fn)
}

// SetWaitHook makes fn run each time a goroutine running a loop starts
// waiting (in Close, PostWait or Source.Remove) for another loop; nil
// removes it.
func SetWaitHook(fn func()) {
	if fn == nil {
		waitHook.Store(nil)
		return
	}
	waitHook.Store(&fn)
}

// LoopID is what SetLoopFreedHook's function is given when l is freed.
func LoopID(l *Loop) uintptr { return uintptr(unsafe.Pointer(l.c.loopRes.ptr)) }
