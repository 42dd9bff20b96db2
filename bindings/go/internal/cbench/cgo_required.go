// SPDX-License-Identifier: MIT OR Apache-2.0
//go:build !linux || !cgo

package cbench

// As the eventq package's cgo_required.go: without cgo, or on another
// system, the build fails saying why.
var _ int = "eventq: the Go binding needs cgo (CGO_ENABLED=1 and a C compiler) on Linux, and libeventq >= 0.3.0 found by pkg-config (eventq.pc)"
