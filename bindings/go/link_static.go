// SPDX-License-Identifier: MIT OR Apache-2.0
//go:build linux && static

package eventq

// The static variant: -l:libeventq.a pins the archive (it comes before the
// -leventq that pkg-config prints, and --as-needed drops the shared library
// that -leventq would otherwise add), and --static adds Libs.private, the
// system libraries the Rust archive needs.

// #cgo pkg-config: --static eventq
// #cgo LDFLAGS: -l:libeventq.a -Wl,--as-needed
// #include "eventq_go.h"
import "C"
