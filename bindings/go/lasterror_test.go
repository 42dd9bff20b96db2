// SPDX-License-Identifier: MIT OR Apache-2.0
//go:build linux

package eventq_test

import (
	"errors"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"

	eventq "github.com/libeventq/libeventq/bindings/go"
)

// An error from the C library carries its text (eventq_last_error), which
// names the argument or condition, and keeps its identities for errors.Is.
func TestErrorsCarryTheLibraryText(t *testing.T) {
	_, err := eventq.NewChan(eventq.WithCapacity(0))
	if err == nil {
		t.Fatal("NewChan(WithCapacity(0)) succeeded")
	}
	if !errors.Is(err, syscall.EINVAL) {
		t.Errorf("errors.Is(%v, EINVAL) is false", err)
	}
	if msg := err.Error(); !strings.Contains(msg, "eventq_chan_new: ") || !strings.Contains(msg, "capacity") {
		t.Errorf("NewChan(WithCapacity(0)): %q does not name eventq_chan_new and the capacity", msg)
	}

	dir := filepath.Join(t.TempDir(), "no-such-cgroup")
	_, err = eventq.OpenCgroup(dir)
	if err == nil {
		t.Fatalf("OpenCgroup(%s) succeeded", dir)
	}
	if !errors.Is(err, syscall.ENOENT) {
		t.Errorf("errors.Is(%v, ENOENT) is false", err)
	}
	if msg := err.Error(); !strings.Contains(msg, "eventq_memcg_open: ") || !strings.Contains(msg, dir) {
		t.Errorf("OpenCgroup: %q does not carry the library's text naming %s", msg, dir)
	}
}

// The text is the failing call's own, even with goroutines failing
// differently at once on every thread: each error names its own call.
func TestErrorTextsDoNotCross(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(8))
	dir := t.TempDir()
	var wg sync.WaitGroup
	errs := make(chan string, 64)
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				if g%2 == 0 {
					_, err := eventq.NewChan(eventq.WithCapacity(0))
					if err == nil || !strings.Contains(err.Error(), "eventq_chan_new: ") {
						errs <- "NewChan: " + errString(err)
						return
					}
				} else {
					_, err := eventq.OpenCgroup(filepath.Join(dir, "none"))
					if err == nil || !strings.Contains(err.Error(), "eventq_memcg_open: ") {
						errs <- "OpenCgroup: " + errString(err)
						return
					}
				}
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

func errString(err error) string {
	if err == nil {
		return "nil"
	}
	return err.Error()
}
