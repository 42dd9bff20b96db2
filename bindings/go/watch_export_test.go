// SPDX-License-Identifier: MIT OR Apache-2.0
//go:build linux

package eventq

// LiveMemcgPumps is the number of MemcgWatch goroutines (started by Next)
// not yet ended.
func LiveMemcgPumps() int64 { return liveMemcgPumps.Load() }
