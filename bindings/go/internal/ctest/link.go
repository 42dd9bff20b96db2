//go:build !static

package ctest

// #cgo pkg-config: eventq
import "C"
