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

static int eq_add_memcg_threshold(const eventq_loop *lp, const eventq_memcg *cg,
                                  uint64_t bytes, uintptr_t h, eventq_source **out) {
	return eventq_loop_add_memcg_threshold(lp, cg, bytes, eq_memcg_cb, (void *)h,
	                                       eq_memcg_destroy, out);
}
static int eq_add_memcg_oom(const eventq_loop *lp, const eventq_memcg *cg, uintptr_t h,
                            eventq_source **out) {
	return eventq_loop_add_memcg_oom(lp, cg, eq_memcg_cb, (void *)h, eq_memcg_destroy, out);
}
static int eq_add_memcg_pressure(const eventq_loop *lp, const eventq_memcg *cg, uint32_t level,
                                 uint32_t mode, uintptr_t h, eventq_source **out) {
	return eventq_loop_add_memcg_pressure_level(lp, cg, level, mode, eq_memcg_cb, (void *)h,
	                                            eq_memcg_destroy, out);
}
static int eq_add_memcg_psi(const eventq_loop *lp, const eventq_memcg *cg, uint32_t kind,
                            uint64_t stall_us, uint64_t window_us, uintptr_t h,
                            eventq_source **out) {
	return eventq_loop_add_memcg_psi(lp, cg, kind, stall_us, window_us, eq_memcg_cb, (void *)h,
	                                 eq_memcg_destroy, out);
}
static int eq_add_memcg_events(const eventq_loop *lp, const eventq_memcg *cg, const char *file,
                               uintptr_t h, eventq_source **out) {
	return eventq_loop_add_memcg_events(lp, cg, file, eq_memcg_cb, (void *)h, eq_memcg_destroy,
	                                    out);
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
// are different directories). Sources made with it do not need it: Close
// it when done adding them.
type Cgroup struct {
	ptr *C.eventq_memcg
	ref refGuard
}

// CgroupError is an error of the memory-cgroup calls: what was being done
// and the errno, with the library's explanation of what is missing. It
// wraps the syscall.Errno, so errors.Is(err, syscall.ENODEV) holds:
//
//   - ENOENT: no such cgroup (does not exist, is not a cgroup, removed);
//   - ENODEV: the controller is not there: the cgroup v1 memory controller
//     is not mounted, the cgroup2 memory controller is not enabled for the
//     cgroup, or the kernel lacks the interface;
//   - EACCES, EPERM: no permission (EPERM also for a PSI window that is not
//     a multiple of 2 s without CAP_SYS_RESOURCE);
//   - EOPNOTSUPP: the kernel has no PSI, or it is disabled;
//   - EINVAL: a bad argument.
type CgroupError struct {
	Op    string
	Errno syscall.Errno
}

func (e *CgroupError) Error() string {
	return fmt.Sprintf("eventq: %s: %s", e.Op, C.GoString(C.eventq_memcg_strerror(C.int(e.Errno))))
}

// Unwrap returns the errno.
func (e *CgroupError) Unwrap() error { return e.Errno }

func cgroupErr(op string, rc C.int) error {
	if rc >= 0 {
		return nil
	}
	switch errno := syscall.Errno(-rc); errno {
	case syscall.ENOENT, syscall.ENODEV, syscall.EACCES, syscall.EPERM, syscall.EOPNOTSUPP,
		syscall.EINVAL:
		return &CgroupError{Op: op, Errno: errno}
	default:
		return errOf(rc)
	}
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
	if rc := C.eventq_memcg_own(&p); rc < 0 {
		return nil, cgroupErr("own memory cgroup", rc)
	}
	return newCgroup(p), nil
}

// OpenCgroup returns the cgroup at dir: a directory of the cgroup v1
// memory hierarchy, or of cgroup2.
func OpenCgroup(dir string) (*Cgroup, error) {
	cdir := C.CString(dir)
	defer C.free(unsafe.Pointer(cdir))
	var p *C.eventq_memcg
	if rc := C.eventq_memcg_open(cdir, &p); rc < 0 {
		return nil, cgroupErr("cgroup "+dir, rc)
	}
	return newCgroup(p), nil
}

// Close frees the handle (sources made with it keep working). A second
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
	// MemPSI: a PSI trigger fired (one call per wake-up).
	MemPSI MemcgKind = C.EVENTQ_MEMCG_PSI
	// MemChanged: counters of a flat-keyed file (memory.events) changed;
	// see Deltas.
	MemChanged MemcgKind = C.EVENTQ_MEMCG_CHANGED
	// MemRemoved: the cgroup was removed; the source is disabled after
	// this call.
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

// MemcgEvent is what a memory source reported; the callback may keep it.
// Fields that do not apply to Kind are zero.
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

// MemcgFunc is called on the loop's goroutine once per wake-up of a memory
// source. A non-nil error disables the source (see Source.Err).
type MemcgFunc func(src *Source, ev *MemcgEvent) error

// memcgFns holds each memory source's callback, keyed by its Source (the
// Source type is shared with the other kinds). Deleted by its destroy hook.
var memcgFns sync.Map

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

// memcgCall runs the source's memory callback.
func (s *Source) memcgCall(ev *MemcgEvent) error {
	fn, ok := memcgFns.Load(s)
	if !ok {
		return nil
	}
	return fn.(MemcgFunc)(s, ev)
}

// addMemcg adds a memory source with call, one of the eq_add_memcg shims.
// cg may be nil only where the C call accepts NULL (PSI: system-wide).
func (l *Loop) addMemcg(op string, cg *Cgroup, fn MemcgFunc,
	call func(lp *C.eventq_loop, cg *C.eventq_memcg, h C.uintptr_t, out **C.eventq_source) C.int) (*Source, error) {
	if fn == nil {
		return nil, syscall.EINVAL
	}
	var cptr *C.eventq_memcg
	if cg != nil {
		if !cg.use() {
			return nil, &CgroupError{Op: op + ": cgroup handle closed", Errno: syscall.EBADF}
		}
		defer cg.done()
		cptr = cg.ptr
	}
	s := &Source{}
	s.onDestroy = func() { memcgFns.Delete(s) }
	memcgFns.Store(s, fn)
	var rc C.int
	src, err := l.add(s, func(c *loopCore, h C.uintptr_t, out **C.eventq_source) C.int {
		rc = call(c.ptr, cptr, h, out)
		return rc
	})
	runtime.KeepAlive(cg)
	if err != nil && rc < 0 {
		return nil, cgroupErr(op, rc)
	}
	return src, err
}

// AddMemoryThreshold calls fn each time the cgroup's memory usage crosses
// bytes, up or down (kubelet's eviction threshold notifier; cgroup v1),
// with the number of crossings since the last call and the usage just
// after. When the cgroup is removed fn gets MemRemoved once.
func (l *Loop) AddMemoryThreshold(cg *Cgroup, bytes uint64, fn MemcgFunc) (*Source, error) {
	if cg == nil {
		return nil, syscall.EINVAL
	}
	return l.addMemcg("memory threshold", cg, fn, func(lp *C.eventq_loop, c *C.eventq_memcg, h C.uintptr_t, out **C.eventq_source) C.int {
		return C.eq_add_memcg_threshold(lp, c, C.uint64_t(bytes), h, out)
	})
}

// AddOOM calls fn each time the cgroup hits its limit (cgroup v1
// memory.oom_control), with the count since the last call.
func (l *Loop) AddOOM(cg *Cgroup, fn MemcgFunc) (*Source, error) {
	if cg == nil {
		return nil, syscall.EINVAL
	}
	return l.addMemcg("OOM notifier", cg, fn, func(lp *C.eventq_loop, c *C.eventq_memcg, h C.uintptr_t, out **C.eventq_source) C.int {
		return C.eq_add_memcg_oom(lp, c, h, out)
	})
}

// AddPressureLevel calls fn on memory.pressure_level notifications for
// level in mode (cgroup v1), with the count since the last call.
func (l *Loop) AddPressureLevel(cg *Cgroup, level PressureLevel, mode PressureMode, fn MemcgFunc) (*Source, error) {
	if cg == nil {
		return nil, syscall.EINVAL
	}
	return l.addMemcg("memory.pressure_level", cg, fn, func(lp *C.eventq_loop, c *C.eventq_memcg, h C.uintptr_t, out **C.eventq_source) C.int {
		return C.eq_add_memcg_pressure(lp, c, C.uint32_t(level), C.uint32_t(mode), h, out)
	})
}

// AddPSITrigger calls fn each time PSI trigger t fires on the cgroup's
// cgroup2 memory.pressure, or system-wide (/proc/pressure/memory) when cg
// is nil. The kernel fires a trigger at most once per window.
func (l *Loop) AddPSITrigger(cg *Cgroup, t PSITrigger, fn MemcgFunc) (*Source, error) {
	if t.Stall < 0 || t.Window < 0 {
		return nil, &CgroupError{Op: "PSI trigger " + t.String(), Errno: syscall.EINVAL}
	}
	kind := C.uint32_t(C.EVENTQ_MEMCG_PSI_SOME)
	if t.Full {
		kind = C.EVENTQ_MEMCG_PSI_FULL
	}
	return l.addMemcg("PSI trigger "+t.String(), cg, fn, func(lp *C.eventq_loop, c *C.eventq_memcg, h C.uintptr_t, out **C.eventq_source) C.int {
		return C.eq_add_memcg_psi(lp, c, kind, C.uint64_t(t.Stall.Microseconds()),
			C.uint64_t(t.Window.Microseconds()), h, out)
	})
}

// AddMemoryEvents calls fn when the cgroup's cgroup2 memory.events
// counters (low, high, max, oom, oom_kill, ...) change, with the counters
// that changed as Deltas.
func (l *Loop) AddMemoryEvents(cg *Cgroup, fn MemcgFunc) (*Source, error) {
	return l.AddCgroupEventsFile(cg, "memory.events", fn)
}

// AddCgroupEventsFile is AddMemoryEvents for any flat-keyed cgroup2 file
// the kernel notifies on (memory.events.local, memory.swap.events,
// cgroup.events).
func (l *Loop) AddCgroupEventsFile(cg *Cgroup, file string, fn MemcgFunc) (*Source, error) {
	if cg == nil {
		return nil, syscall.EINVAL
	}
	cfile := C.CString(file)
	defer C.free(unsafe.Pointer(cfile))
	return l.addMemcg(file, cg, fn, func(lp *C.eventq_loop, c *C.eventq_memcg, h C.uintptr_t, out **C.eventq_source) C.int {
		return C.eq_add_memcg_events(lp, c, cfile, h, out)
	})
}
