// SPDX-License-Identifier: MIT OR Apache-2.0
//go:build linux && !static

package cbench

// #cgo pkg-config: eventq
import "C"
