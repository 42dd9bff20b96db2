// SPDX-License-Identifier: MIT OR Apache-2.0
//go:build !linux || !cgo

package eventq

// The binding is cgo over libeventq's C ABI, on Linux. Built without cgo
// (CGO_ENABLED=0, or no C compiler found) or for another system, every
// file but this one drops out of the build, and this line fails it with a
// message saying why, instead of "undefined: Chan" from the files that
// remain.
var _ int = "eventq: the Go binding needs cgo (CGO_ENABLED=1 and a C compiler) on Linux, and libeventq >= 0.3.0 found by pkg-config (eventq.pc)"
