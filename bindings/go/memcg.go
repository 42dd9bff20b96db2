// SPDX-License-Identifier: MIT OR Apache-2.0
//go:build linux

package eventq

/*
#include <stdint.h>
#include <stdlib.h>
#include <eventq.h>

// The Go trampolines of callbacks.go (declared by cgo in _cgo_export.h).
extern int eqGoMemcg(eventq_source *src, eventq_memcg_event *ev, uintptr_t h);
extern void eqGoDestroy(uintptr_t h);

// As in loop.go: userdata carries a cgo.Handle as an integer, cast to and
// from the ABI's void * only here in C.
static int eq_memcg_cb(eventq_source *s, const eventq_memcg_event *ev, void *ud) {
	return eqGoMemcg(s, (eventq_memcg_event *)ev, (uintptr_t)ud);
}
static void eq_memcg_destroy(void *ud) { eqGoDestroy((uintptr_t)ud); }

static int eq_add_memcg(const eventq_loop *lp, eventq_memcg_watch *w, uintptr_t h,
                        eventq_source **out) {
	return eventq_loop_add_memcg(lp, w, eq_memcg_cb, (void *)h, eq_memcg_destroy, out);
}
*/
import "C"

import (
	"fmt"
	"runtime"
	"sync"
	"syscall"
	"time"
	"unsafe"
)

// Cgroup is a memory cgroup: its directory in the cgroup v1 memory
// hierarchy, its cgroup2 directory, or both (a hybrid system, where they
// are different directories). Watches made with it do not need it: Close
// it when done making them.
type Cgroup struct {
	ptr *C.eventq_memcg
	ref refGuard
}

// memcgErr is the error of a memory-cgroup call that returned rc: the
// binding's error type, wrapping the syscall.Errno (so errors.Is(err,
// syscall.ENODEV) holds), with what was being done and the library's
// description of the code, which says what is missing:
//
//   - ENOENT: no such cgroup (does not exist, is not a cgroup, removed);
//   - ENODEV: the controller is not there: the cgroup v1 memory controller
//     is not mounted, the cgroup2 memory controller is not enabled for the
//     cgroup, or the kernel lacks the interface;
//   - EACCES, EPERM: no permission (EPERM also for a PSI window that is not
//     a multiple of 2 s without CAP_SYS_RESOURCE);
//   - EOPNOTSUPP: the kernel has no PSI, or it is disabled;
//   - EINVAL: a bad argument.
func memcgErr(op string, rc C.int, text string) error {
	if rc >= 0 {
		return nil
	}
	return withText(&errnoError{"eventq: " + op + ": " + Strerror(int(rc)), syscall.Errno(-rc)}, text)
}

func newCgroup(p *C.eventq_memcg) *Cgroup {
	cg := &Cgroup{ptr: p}
	cg.ref.init()
	runtime.SetFinalizer(cg, (*Cgroup).Close)
	return cg
}

// OwnCgroup returns the calling process's memory cgroup, found from
// /proc/self/cgroup and the mounts.
func OwnCgroup() (*Cgroup, error) {
	var p *C.eventq_memcg
	if rc, text := cCall(func() C.int { return C.eventq_memcg_own(&p) }); rc < 0 {
		return nil, memcgErr("own memory cgroup", rc, text)
	}
	return newCgroup(p), nil
}

// OpenCgroup returns the cgroup at dir: a directory of the cgroup v1
// memory hierarchy, or of cgroup2.
func OpenCgroup(dir string) (*Cgroup, error) {
	cdir := C.CString(dir)
	defer C.free(unsafe.Pointer(cdir))
	var p *C.eventq_memcg
	if rc, text := cCall(func() C.int { return C.eventq_memcg_open(cdir, &p) }); rc < 0 {
		return nil, memcgErr("cgroup "+dir, rc, text)
	}
	return newCgroup(p), nil
}

// Close frees the handle (watches made with it keep working). A second
// Close does nothing.
func (cg *Cgroup) Close() error {
	if cg.ref.close() {
		runtime.SetFinalizer(cg, nil)
		cg.done()
	}
	return nil
}

func (cg *Cgroup) use() bool { return cg != nil && cg.ref.acquire() }

func (cg *Cgroup) done() {
	if cg.ref.release() {
		C.eventq_memcg_free(cg.ptr)
	}
}

func (cg *Cgroup) dir(version C.uint32_t) string {
	if !cg.use() {
		return ""
	}
	defer cg.done()
	n := C.eventq_memcg_dir(cg.ptr, version, nil, 0)
	if n <= 0 {
		return ""
	}
	buf := make([]byte, int(n)+1)
	n = C.eventq_memcg_dir(cg.ptr, version, (*C.char)(unsafe.Pointer(&buf[0])), C.size_t(len(buf)))
	if n <= 0 {
		return ""
	}
	return string(buf[:n])
}

// V1Dir is the cgroup's directory in the cgroup v1 memory hierarchy, ""
// if none (or after Close).
func (cg *Cgroup) V1Dir() string { return cg.dir(C.EVENTQ_MEMCG_V1) }

// V2Dir is the cgroup's cgroup2 directory, "" if none (or after Close).
func (cg *Cgroup) V2Dir() string { return cg.dir(C.EVENTQ_MEMCG_V2) }

// MemcgKind says what a memory source reported.
type MemcgKind uint32

const (
	// MemThreshold: memory.usage_in_bytes crossed the threshold, up or
	// down, Count times since the last call (cgroup v1).
	MemThreshold MemcgKind = C.EVENTQ_MEMCG_THRESHOLD
	// MemOOM: the cgroup hit its limit Count times since the last call
	// (cgroup v1 memory.oom_control).
	MemOOM MemcgKind = C.EVENTQ_MEMCG_OOM
	// MemPressure: memory.pressure_level notified Count times (cgroup v1).
	MemPressure MemcgKind = C.EVENTQ_MEMCG_PRESSURE
	// MemPSI: a PSI trigger fired (Count 1: the kernel keeps a firing as a
	// flag, so firings not yet read are one event).
	MemPSI MemcgKind = C.EVENTQ_MEMCG_PSI
	// MemChanged: counters of a flat-keyed file (memory.events) changed;
	// see Deltas.
	MemChanged MemcgKind = C.EVENTQ_MEMCG_CHANGED
	// MemRemoved: the cgroup was removed: the watch's last event (a loop
	// source is disabled after this call; Next returns ErrWatchEnded).
	MemRemoved MemcgKind = C.EVENTQ_MEMCG_REMOVED
)

func (k MemcgKind) String() string {
	switch k {
	case MemThreshold:
		return "threshold"
	case MemOOM:
		return "oom"
	case MemPressure:
		return "pressure"
	case MemPSI:
		return "psi"
	case MemChanged:
		return "changed"
	case MemRemoved:
		return "removed"
	}
	return fmt.Sprintf("MemcgKind(%d)", uint32(k))
}

// PressureLevel is a memory.pressure_level level.
type PressureLevel uint32

const (
	PressureLow      PressureLevel = C.EVENTQ_MEMCG_LOW
	PressureMedium   PressureLevel = C.EVENTQ_MEMCG_MEDIUM
	PressureCritical PressureLevel = C.EVENTQ_MEMCG_CRITICAL
)

func (l PressureLevel) String() string {
	switch l {
	case PressureLow:
		return "low"
	case PressureMedium:
		return "medium"
	case PressureCritical:
		return "critical"
	}
	return fmt.Sprintf("PressureLevel(%d)", uint32(l))
}

// PressureMode is how memory.pressure_level events propagate: Default
// notifies for the level and above, also for descendants unless one of
// theirs took it; Hierarchy always also for descendants; Local only for
// the cgroup's own reclaim.
type PressureMode uint32

const (
	ModeDefault   PressureMode = C.EVENTQ_MEMCG_MODE_DEFAULT
	ModeHierarchy PressureMode = C.EVENTQ_MEMCG_MODE_HIERARCHY
	ModeLocal     PressureMode = C.EVENTQ_MEMCG_MODE_LOCAL
)

// PSITrigger is a PSI trigger: fire when tasks stalled on memory for at
// least Stall within any Window ("some": at least one task; Full: all
// non-idle tasks at once). Window is 500ms..10s; without CAP_SYS_RESOURCE
// it must be a multiple of 2s.
type PSITrigger struct {
	Full   bool
	Stall  time.Duration
	Window time.Duration
}

func (t PSITrigger) String() string {
	kind := "some"
	if t.Full {
		kind = "full"
	}
	return fmt.Sprintf("%s %d %d", kind, t.Stall.Microseconds(), t.Window.Microseconds())
}

// MemcgDelta is a counter that changed (MemChanged).
type MemcgDelta struct {
	Name  string
	Value uint64 // its new value
	Delta int64  // its change since the previous read
}

// MemcgEvent is what a memory watch reported, to a Loop callback or from
// Next; it is Go memory, the receiver may keep it. Fields that do not
// apply to Kind are zero.
type MemcgEvent struct {
	Kind MemcgKind
	// Count is the kernel's notifications since the last call for cgroup
	// v1 sources (the eventfd counter: none is merged away); 1 for PSI.
	Count uint64
	// Threshold is the registered threshold and Usage memory.usage_in_bytes
	// read just after the wake-up (MemThreshold).
	Threshold, Usage uint64
	// UnderOOM and OOMKill are memory.oom_control's fields (MemOOM).
	UnderOOM bool
	OOMKill  uint64
	// Level and Mode are the registered ones (MemPressure).
	Level PressureLevel
	Mode  PressureMode
	// PSI is the trigger (MemPSI).
	PSI PSITrigger
	// Spec says what the source watches: the control file and arguments.
	Spec string
	// Deltas are the counters that changed (MemChanged).
	Deltas []MemcgDelta
}

// MemcgFunc is called on the loop's goroutine once per event of a memory
// source. A non-nil error disables the source (see Source.Err).
type MemcgFunc func(src *Source, ev *MemcgEvent) error

func memcgEventOf(ev *C.eventq_memcg_event) *MemcgEvent {
	e := &MemcgEvent{
		Kind:      MemcgKind(ev.kind),
		Count:     uint64(ev.count),
		Threshold: uint64(ev.threshold),
		Usage:     uint64(ev.usage),
		UnderOOM:  bool(ev.under_oom),
		OOMKill:   uint64(ev.oom_kill),
		Level:     PressureLevel(ev.level),
		Mode:      PressureMode(ev.mode),
		Spec:      C.GoString(ev.spec),
	}
	if e.Kind == MemPSI {
		e.PSI = PSITrigger{
			Full:   ev.psi_kind == C.EVENTQ_MEMCG_PSI_FULL,
			Stall:  time.Duration(ev.psi_stall_us) * time.Microsecond,
			Window: time.Duration(ev.psi_window_us) * time.Microsecond,
		}
	}
	if ev.ndeltas > 0 {
		ds := unsafe.Slice(ev.deltas, int(ev.ndeltas))
		e.Deltas = make([]MemcgDelta, len(ds))
		for i, d := range ds {
			e.Deltas[i] = MemcgDelta{Name: C.GoString(d.name), Value: uint64(d.value), Delta: int64(d.delta)}
		}
	}
	return e
}

// MemcgWatch is one registration with the kernel: a cgroup v1 threshold,
// OOM or pressure-level notifier, a PSI trigger, or a cgroup2 counters
// file; made by WatchThreshold, WatchOOM, WatchPressureLevel, WatchPSI,
// WatchMemoryEvents or WatchCounters. Wait for its events with Next or
// Events, in Go's netpoller, or hand it to a Loop with Loop.AddMemcg, which
// takes it over: one or the other. Close it when done (a finalizer does,
// as a backstop), which unregisters it; a watch added to a loop is closed
// with its source.
type MemcgWatch struct {
	mu     sync.Mutex
	ptr    *C.eventq_memcg_watch // nil once added, closed or handed to its pump
	pump   *memcgPump            // set by the first Next
	closed bool
}

// take hands the C watch to the caller, once; nil after that, and once
// Next started the watch's pump.
func (w *MemcgWatch) take() *C.eventq_memcg_watch {
	w.mu.Lock()
	defer w.mu.Unlock()
	p := w.ptr
	w.ptr = nil
	return p
}

// Close unregisters the watch and frees it: goroutines waiting in Next
// wake with ErrWatchClosed, and the goroutine and fd that Next started are
// gone when Close returns. A watch added to a loop (its source owns it
// now), or a second Close, does nothing.
func (w *MemcgWatch) Close() error {
	w.closeWatch()
	return nil
}

// newWatch makes a watch with call, one of the eventq_memcg_watch_*
// constructors, on cg; cg may be nil only where nilOK (PSI: system-wide).
func newWatch(op string, cg *Cgroup, nilOK bool,
	call func(cg *C.eventq_memcg, out **C.eventq_memcg_watch) C.int) (*MemcgWatch, error) {
	var cptr *C.eventq_memcg
	if cg == nil && !nilOK {
		return nil, &errnoError{"eventq: " + op + ": no cgroup", syscall.EINVAL}
	}
	if cg != nil {
		if !cg.use() {
			return nil, ErrCgroupClosed
		}
		defer cg.done()
		cptr = cg.ptr
	}
	var p *C.eventq_memcg_watch
	rc, text := cCall(func() C.int { return call(cptr, &p) })
	runtime.KeepAlive(cg)
	if rc < 0 {
		return nil, memcgErr(op, rc, text)
	}
	w := &MemcgWatch{ptr: p}
	runtime.SetFinalizer(w, (*MemcgWatch).Close)
	return w, nil
}

// WatchThreshold watches the cgroup's memory usage crossing bytes, up or
// down (kubelet's eviction threshold notifier; cgroup v1): each MemThreshold
// event has the number of crossings since the last one and the usage just
// after.
func WatchThreshold(cg *Cgroup, bytes uint64) (*MemcgWatch, error) {
	return newWatch("memory threshold", cg, false, func(c *C.eventq_memcg, out **C.eventq_memcg_watch) C.int {
		return C.eventq_memcg_watch_threshold(c, C.uint64_t(bytes), out)
	})
}

// WatchOOM watches the cgroup hitting its limit (cgroup v1
// memory.oom_control): each MemOOM event has the count since the last one.
func WatchOOM(cg *Cgroup) (*MemcgWatch, error) {
	return newWatch("OOM notifier", cg, false, func(c *C.eventq_memcg, out **C.eventq_memcg_watch) C.int {
		return C.eventq_memcg_watch_oom(c, out)
	})
}

// WatchPressureLevel watches memory.pressure_level notifications for level
// in mode (cgroup v1): each MemPressure event has the count since the last
// one.
func WatchPressureLevel(cg *Cgroup, level PressureLevel, mode PressureMode) (*MemcgWatch, error) {
	return newWatch("memory.pressure_level", cg, false, func(c *C.eventq_memcg, out **C.eventq_memcg_watch) C.int {
		return C.eventq_memcg_watch_pressure_level(c, C.uint32_t(level), C.uint32_t(mode), out)
	})
}

// WatchPSI is PSI trigger t on the cgroup's cgroup2 memory.pressure, or
// system-wide (/proc/pressure/memory) when cg is nil: a MemPSI event each
// time it fires (at most once per window).
//
// Next waits for it in the netpoller like any other watch, although the
// kernel signals a trigger with POLLPRI, which the netpoller never asks
// for: the library polls the trigger's file from an epoll, which is
// readable when the trigger fired. The kernel clears a firing at the first
// poll of that file, which is then the netpoller's, so the watch reads the
// firing from the netpoller's report: its goroutine stays waiting for the
// watch's life, and no report is lost (see Next). A cgroup's triggers
// share the cgroup file's wake-ups in the kernel; one woken by another
// trigger's firing reports nothing.
func WatchPSI(cg *Cgroup, t PSITrigger) (*MemcgWatch, error) {
	op := "PSI trigger " + t.String()
	if t.Stall < 0 || t.Window < 0 {
		return nil, &errnoError{"eventq: " + op + ": negative duration", syscall.EINVAL}
	}
	kind := C.uint32_t(C.EVENTQ_MEMCG_PSI_SOME)
	if t.Full {
		kind = C.EVENTQ_MEMCG_PSI_FULL
	}
	return newWatch(op, cg, true, func(c *C.eventq_memcg, out **C.eventq_memcg_watch) C.int {
		return C.eventq_memcg_watch_psi(c, kind, C.uint64_t(t.Stall.Microseconds()),
			C.uint64_t(t.Window.Microseconds()), out)
	})
}

// WatchMemoryEvents watches the cgroup's cgroup2 memory.events counters
// (low, high, max, oom, oom_kill, ...): each MemChanged event has the
// counters that changed as Deltas.
func WatchMemoryEvents(cg *Cgroup) (*MemcgWatch, error) {
	return newWatch("memory.events", cg, false, func(c *C.eventq_memcg, out **C.eventq_memcg_watch) C.int {
		return C.eventq_memcg_watch_events(c, out)
	})
}

// WatchCounters is WatchMemoryEvents for any flat-keyed cgroup2 file the
// kernel notifies on (memory.events.local, memory.swap.events,
// cgroup.events).
func WatchCounters(cg *Cgroup, file string) (*MemcgWatch, error) {
	cfile := C.CString(file)
	defer C.free(unsafe.Pointer(cfile))
	return newWatch(file, cg, false, func(c *C.eventq_memcg, out **C.eventq_memcg_watch) C.int {
		return C.eventq_memcg_watch_counters(c, cfile, out)
	})
}

// AddMemcg adds watch w as a source: fn runs on the loop's goroutine once
// per event of the watch, with a *MemcgEvent copied into Go memory. When
// the cgroup is removed fn gets MemRemoved once and the source is disabled.
// AddMemcg takes w over, also when it fails: w needs no Close, and cannot
// be added again (ErrWatchUsed). A program without a loop needs none:
// MemcgWatch.Next waits in Go's netpoller. A watch closed, or one that
// Next started, cannot be added (ErrWatchUsed).
func (l *Loop) AddMemcg(w *MemcgWatch, fn MemcgFunc) (*Source, error) {
	if w == nil {
		return nil, syscall.EINVAL
	}
	p := w.take()
	if p == nil {
		return nil, ErrWatchUsed
	}
	runtime.SetFinalizer(w, nil)
	if fn == nil {
		C.eventq_memcg_watch_free(p)
		return nil, syscall.EINVAL
	}
	called := false
	src, err := l.add(&Source{memcgFn: fn}, func(c *loopCore, h C.uintptr_t, out **C.eventq_source) C.int {
		called = true // from here on the library owns p, whatever it returns
		return C.eq_add_memcg(c.ptr, p, h, out)
	})
	if !called {
		C.eventq_memcg_watch_free(p)
	}
	return src, err
}
