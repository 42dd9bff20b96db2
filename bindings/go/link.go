// SPDX-License-Identifier: MIT OR Apache-2.0
//go:build linux && !static

package eventq

// Links against the shared library found through pkg-config (eventq.pc).
// Build with -tags static to link libeventq.a instead (see link_static.go).
// Both include eventq_go.h, which stops the build with an #error naming
// the versions when the eventq.h found is older than the binding needs.

// #cgo pkg-config: eventq
// #include "eventq_go.h"
import "C"
