// SPDX-License-Identifier: MIT OR Apache-2.0
//go:build linux

package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// load is a sample of how busy the machine is, so that a report says
// whether its figures came from a quiet machine.
type load struct {
	loadavg string
	busy    float64 // machine-wide busy jiffies (user..softirq)
	steal   float64
	total   float64
	self    float64 // this process's utime+stime jiffies
}

func sampleLoad() load {
	var l load
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(b)); len(f) >= 3 {
			l.loadavg = strings.Join(f[:3], " ")
		}
	}
	if b, err := os.ReadFile("/proc/stat"); err == nil {
		line, _, _ := strings.Cut(string(b), "\n")
		f := strings.Fields(line) // cpu user nice system idle iowait irq softirq steal
		for i := 1; i < len(f); i++ {
			v, _ := strconv.ParseFloat(f[i], 64)
			l.total += v
			switch i {
			case 1, 2, 3, 6, 7:
				l.busy += v
			case 8:
				l.steal = v
			}
		}
	}
	if b, err := os.ReadFile("/proc/self/stat"); err == nil {
		s := string(b)
		// Fields after the command name, which may hold spaces.
		if i := strings.LastIndexByte(s, ')'); i >= 0 {
			f := strings.Fields(s[i+1:])
			if len(f) > 12 {
				u, _ := strconv.ParseFloat(f[11], 64)
				k, _ := strconv.ParseFloat(f[12], 64)
				l.self = u + k
			}
		}
	}
	return l
}

// report describes the time between l and end.
func (l load) report(end load) string {
	total := end.total - l.total
	if total <= 0 {
		return "load: unknown"
	}
	others := (end.busy - l.busy) - (end.self - l.self)
	if others < 0 {
		others = 0
	}
	s := fmt.Sprintf("load average %s at the end; over the run: hypervisor steal %.1f%%, other processes %.1f%% of the machine",
		end.loadavg, 100*(end.steal-l.steal)/total, 100*others/total)
	if others/total > 0.1 || (end.steal-l.steal)/total > 0.05 {
		s += "\nwarning: the machine was not quiet; expect wide ranges and unsettled verdicts"
	}
	return s
}
