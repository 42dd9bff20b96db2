// SPDX-License-Identifier: MIT OR Apache-2.0
//go:build !static

package ctest

// #cgo pkg-config: eventq
import "C"
