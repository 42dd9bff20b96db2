// SPDX-License-Identifier: MIT OR Apache-2.0
//go:build linux && static

package cbench

// As the eventq package's link_static.go.

// #cgo pkg-config: --static eventq
// #cgo LDFLAGS: -l:libeventq.a -Wl,--as-needed
import "C"
