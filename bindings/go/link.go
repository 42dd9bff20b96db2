// SPDX-License-Identifier: MIT OR Apache-2.0
//go:build linux && !static

package eventq

// Links against the shared library found through pkg-config (eventq.pc).
// Build with -tags static to link libeventq.a instead (see link_static.go).

// #cgo pkg-config: eventq
import "C"
