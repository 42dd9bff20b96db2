// SPDX-License-Identifier: MIT OR Apache-2.0
//go:build linux

package eventq

// SetLoopFreedHook makes fn run each time the cleanup of a dropped Loop
// frees it; nil removes it.
func SetLoopFreedHook(fn func()) {
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
