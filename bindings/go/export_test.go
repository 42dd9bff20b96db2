// SPDX-License-Identifier: MIT OR Apache-2.0
//go:build linux

package eventq

// LiveChans is the number of Chan handles not yet freed.
func LiveChans() int64 { return liveChans.Load() }

// LiveHandles is the number of cgo.Handles not yet deleted.
func LiveHandles() int64 { return liveHandles.Load() }

// SetParkHook makes fn run each time a send (send true) or receive (send
// false) on c is about to wait (it queued); nil removes it.
func SetParkHook(c *Chan, fn func(send bool)) {
	if fn == nil {
		parkHook.Store(nil)
		return
	}
	h := func(ch *Chan, d direction) {
		if ch == c {
			fn(d == dirSend)
		}
	}
	parkHook.Store(&h)
}

// SetParkHookAll makes fn run each time a send or receive on any channel
// is about to wait; nil removes it (and any SetParkHook's).
func SetParkHookAll(fn func(c *Chan, send bool)) {
	if fn == nil {
		parkHook.Store(nil)
		return
	}
	h := func(ch *Chan, d direction) { fn(ch, d == dirSend) }
	parkHook.Store(&h)
}

// CgoCall makes one cgo call that does nothing (eventq_version), to
// measure the crossing alone.
func CgoCall() { libVersion() }

// SetSelectParkHook makes fn run each time RecvAny or a Selector's Recv is
// about to wait; nil removes it.
func SetSelectParkHook(fn func()) {
	if fn == nil {
		selectParkHook.Store(nil)
		return
	}
	selectParkHook.Store(&fn)
}

// SetCloseWaitHook makes fn run when Loop.Close starts waiting for a run in
// another goroutine; nil removes it.
func SetCloseWaitHook(fn func()) {
	if fn == nil {
		closeWaitHook.Store(nil)
		return
	}
	closeWaitHook.Store(&fn)
}

// SetPostWaitHook makes fn run each time PostWait is about to wait for
// room; nil removes it.
func SetPostWaitHook(fn func()) {
	if fn == nil {
		postWaitHook.Store(nil)
		return
	}
	postWaitHook.Store(&fn)
}
