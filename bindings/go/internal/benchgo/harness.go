// SPDX-License-Identifier: MIT OR Apache-2.0
//go:build linux

// Command benchgo is `make bench-go`: the Go binding against what a Go
// program would use instead, as ratios measured in the same run.
//
// Each row runs for a time, not a count (at least -min, default 0.5 s), and
// the rows are run -reps times, interleaved (rep 1 runs every row, then rep
// 2, each rep in a rotated order), so that a slow spell of the machine hits
// every row alike. A target's figure is computed per repetition; it is
// reported as the median with its inter-quartile range (the min-max below
// 5 repetitions), and its verdict is "met" only when the whole range meets
// the goal, "MISSED" when the whole range misses it, and "unsettled" when
// the range straddles it; a figure with no goal (a comparison shown for
// information) is "reported". The method and the verdict line are those of
// the Rust and C benches (benches/method/mod.rs, docs/performance.md).
//
// Rows live in the files of this package, one file per subject, each
// registering its rows and targets from an init function (see Register).
package main

import (
	"flag"
	"fmt"
	"math"
	"os"
	"regexp"
	"sort"
	"strings"
	"time"
)

// Result is what one run of a row measured.
type Result struct {
	Ops     float64            // operations done (messages, waits, calls)
	Elapsed time.Duration      // the time they took
	Metrics map[string]float64 // other figures of the run (attempts/msg, p99 ns, ...)
}

// PerSec is the run's throughput.
func (r Result) PerSec() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return r.Ops / r.Elapsed.Seconds()
}

// NsPerOp is the run's time per operation.
func (r Result) NsPerOp() float64 {
	if r.Ops <= 0 {
		return 0
	}
	return float64(r.Elapsed.Nanoseconds()) / r.Ops
}

// Row is one measured configuration. Run does the work repeatedly for at
// least min (the harness passes a short min for -smoke) and returns what it
// did; it must not print. Unit names Ops ("msg", "wait", "call").
type Row struct {
	Group string // the subject, used by -run (pool, select, loop, cthread, ...)
	Name  string // unique within the binary
	Unit  string
	Run   func(min time.Duration) Result
}

// Target is a goal on a figure computed from one repetition's results
// (keyed by row name). Cmp is ">=" or "<="; or "" for a figure that is
// reported with its range but judged against no goal (a comparison worth
// printing that promises nothing).
type Target struct {
	Group string
	Name  string // what is promised, printed as is
	Value func(rep map[string]Result) float64
	Cmp   string
	Goal  float64
	Unit  string // "x", "attempts/msg", ...
}

var (
	rows    []Row
	targets []Target
)

// Register adds rows and targets; call it from an init function.
func Register(rs []Row, ts []Target) {
	rows = append(rows, rs...)
	targets = append(targets, ts...)
}

// Ratio is a Target.Value: num's throughput over den's.
func Ratio(num, den string) func(map[string]Result) float64 {
	return func(rep map[string]Result) float64 {
		if !ran(rep, num, den) {
			return math.NaN()
		}
		return div(rep[num].PerSec(), rep[den].PerSec())
	}
}

// MetricRatio is a Target.Value: num's metric over den's (for latencies).
func MetricRatio(num, den, metric string) func(map[string]Result) float64 {
	return func(rep map[string]Result) float64 {
		if !ran(rep, num, den) {
			return math.NaN()
		}
		return div(rep[num].Metrics[metric], rep[den].Metrics[metric])
	}
}

// Metric is a Target.Value: one row's metric.
func Metric(row, metric string) func(map[string]Result) float64 {
	return func(rep map[string]Result) float64 {
		if !ran(rep, row) {
			return math.NaN()
		}
		return rep[row].Metrics[metric]
	}
}

// ran reports whether the repetition ran all these rows (-run may leave
// out some rows of a group; a target on them is then not judged).
func ran(rep map[string]Result, names ...string) bool {
	for _, n := range names {
		if _, ok := rep[n]; !ok {
			return false
		}
	}
	return true
}

func div(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

func main() {
	reps := flag.Int("reps", 5, "repetitions of every row, interleaved")
	min := flag.Duration("min", 500*time.Millisecond, "the least time of one row's run")
	run := flag.String("run", "", "only the rows whose group or name match this regexp")
	smoke := flag.Bool("smoke", false, "every row once, briefly, no verdicts (for make test)")
	flag.Parse()
	if *smoke {
		*reps, *min = 1, 20*time.Millisecond
	}
	re, err := regexp.Compile(*run)
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchgo: -run:", err)
		os.Exit(2)
	}
	var sel []Row
	for _, r := range rows {
		if re.MatchString(r.Group) || re.MatchString(r.Name) {
			sel = append(sel, r)
		}
	}
	if len(sel) == 0 {
		fmt.Fprintln(os.Stderr, "benchgo: no row matches", *run)
		os.Exit(2)
	}

	load0 := sampleLoad()
	results := make([]map[string]Result, *reps)
	for rep := range *reps {
		results[rep] = map[string]Result{}
		for i := range sel {
			r := sel[(i+rep)%len(sel)]
			results[rep][r.Name] = r.Run(*min)
		}
	}
	load1 := sampleLoad()

	fmt.Printf("benchgo: %d reps, rows of at least %v, interleaved\n", *reps, *min)
	fmt.Println(load0.report(load1))
	printRows(sel, results)
	if !*smoke {
		printTargets(sel, results)
	}
}

func printRows(sel []Row, results []map[string]Result) {
	group := ""
	for _, r := range sel {
		if r.Group != group {
			group = r.Group
			fmt.Printf("\n[%s]\n", group)
		}
		var tput []float64
		metrics := map[string][]float64{}
		for _, rep := range results {
			res := rep[r.Name]
			tput = append(tput, res.PerSec())
			for k, v := range res.Metrics {
				metrics[k] = append(metrics[k], v)
			}
		}
		q := quartiles(tput)
		fmt.Printf("  %-52s %9s %s/s (%s–%s)", r.Name, human(q[1]), r.Unit, human(q[0]), human(q[2]))
		var keys []string
		for k := range metrics {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Printf("  %s %s", k, short(quartiles(metrics[k])[1]))
		}
		fmt.Println()
	}
}

func printTargets(sel []Row, results []map[string]Result) {
	groups := map[string]bool{}
	for _, r := range sel {
		groups[r.Group] = true
	}
	first := true
	for _, t := range targets {
		if !groups[t.Group] {
			continue
		}
		var v []float64
		for _, rep := range results {
			if x := t.Value(rep); !math.IsNaN(x) {
				v = append(v, x)
			}
		}
		if len(v) == 0 {
			continue // its rows were not run
		}
		if first {
			fmt.Println("\ntargets (per-repetition figures: median and inter-quartile range, min-max below 5 repetitions):")
			first = false
		}
		q := spread(v)
		u := t.Unit
		if u != "x" && u != "%" {
			u = " " + u
		}
		kind := "IQR"
		if len(v) < 5 {
			kind = "min-max"
		}
		fig := fmt.Sprintf("median %s%s (%s %s-%s%s, %d reps)", short(q[1]), u, kind, short(q[0]), short(q[2]), u, len(v))
		if t.Cmp == "" {
			fmt.Printf("%-92s %s: reported\n", "figure "+t.Name+":", fig)
			continue
		}
		head := fmt.Sprintf("target %s %s %s%s:", t.Name, t.Cmp, short(t.Goal), u)
		fmt.Printf("%-92s %s: %s\n", head, fig, verdict(q, t.Cmp, t.Goal))
	}
}

// verdict judges the spread [q0, q2] against the goal.
func verdict(q [3]float64, cmp string, goal float64) string {
	lo, hi := q[0], q[2]
	switch cmp {
	case ">=":
		if lo >= goal {
			return "met"
		}
		if hi < goal {
			return "MISSED"
		}
	case "<=":
		if hi <= goal {
			return "met"
		}
		if lo > goal {
			return "MISSED"
		}
	default:
		panic("benchgo: target comparison " + cmp)
	}
	return "unsettled"
}

// spread returns the low end, the median and the high end of the
// per-repetition figures: the quartiles from 5 values on, else the min-max.
func spread(v []float64) [3]float64 {
	if len(v) >= 5 {
		return quartiles(v)
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	q := quartiles(v)
	return [3]float64{s[0], q[1], s[len(s)-1]}
}

// quartiles returns the first quartile, the median and the third quartile
// (linear interpolation; one value gives itself three times).
func quartiles(v []float64) [3]float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	at := func(p float64) float64 {
		if len(s) == 0 {
			return 0
		}
		x := p * float64(len(s)-1)
		i := int(x)
		if i+1 >= len(s) {
			return s[len(s)-1]
		}
		return s[i] + (x-float64(i))*(s[i+1]-s[i])
	}
	return [3]float64{at(0.25), at(0.5), at(0.75)}
}

func human(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.2fM", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.1fk", v/1e3)
	}
	return fmt.Sprintf("%.0f", v)
}

func short(v float64) string {
	s := fmt.Sprintf("%.3g", v)
	if strings.Contains(s, "e") {
		s = fmt.Sprintf("%.0f", v)
	}
	return s
}
