// Command faults turns the log of the integration suite's fault tests
// (go test -v, several runs; bench/faults/run.sh) into the blind-time
// table of BENCHMARKS.md: per fault, the time from a change's put until
// every frontend answered it, p50/p99/max over the runs; the queries the
// frontends failed to answer per test; and the detection's cost while idle.
package main

import (
	"bufio"
	"fmt"
	"os"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

var (
	// cluster_test.go: "blind time, <fault>: <duration> (put to answered ...)"
	blindRe = regexp.MustCompile(`blind time, (.+): ([0-9.]+[mµn]?s) \(`)
	// grpcproxy_test.go: "frontend N answers the change D after its put, the proxy it watched through <what>"
	proxyRe = regexp.MustCompile(`frontend (\d+) answers the change ([0-9.]+[mµn]?s) after its put, the proxy it watched through (.+)$`)
	// cluster_test.go: "publisher: service answered by every frontend D after <what>"
	pubRe = regexp.MustCompile(`publisher: service answered by every frontend ([0-9.]+[mµn]?s) after (.+)$`)
	// "frontend N: Q queries in D, F failed"
	loadRe = regexp.MustCompile(`frontend \d+: (\d+) queries in .*, (\d+) failed`)
	costRe = regexp.MustCompile(`detection cost while idle, per frontend: ([0-9.]+) watch-stream requests/s, ([0-9.]+) reads/s`)
	testRe = regexp.MustCompile(`^\s*--- (PASS|FAIL): (Test\w+)`)
)

type fault struct {
	name  string
	times []time.Duration
}

func main() {
	var faults []*fault
	byName := map[string]*fault{}
	add := func(name string, d time.Duration) {
		f := byName[name]
		if f == nil {
			f = &fault{name: name}
			byName[name] = f
			faults = append(faults, f)
		}
		f.times = append(f.times, d)
	}
	// The proxy test logs each frontend; a fault's blind time is its
	// slowest frontend, per run.
	proxyRun := map[string]time.Duration{}
	var sent, failed int
	var watchCost, readCost []float64
	results := map[string]int{}
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		line := sc.Text()
		if m := blindRe.FindStringSubmatch(line); m != nil {
			add(m[1], dur(m[2]))
		}
		if m := pubRe.FindStringSubmatch(line); m != nil {
			add("publisher's service, from "+m[2], dur(m[1]))
		}
		if m := proxyRe.FindStringSubmatch(line); m != nil {
			what := "grpc-proxy the frontends watch through " + m[3]
			if m[1] == "0" && proxyRun[what] != 0 {
				add(what, proxyRun[what])
				proxyRun[what] = 0
			}
			proxyRun[what] = max(proxyRun[what], dur(m[2]))
		}
		if m := loadRe.FindStringSubmatch(line); m != nil {
			sent += atoi(m[1])
			failed += atoi(m[2])
		}
		if m := costRe.FindStringSubmatch(line); m != nil {
			watchCost = append(watchCost, atof(m[1]))
			readCost = append(readCost, atof(m[2]))
		}
		if m := testRe.FindStringSubmatch(line); m != nil {
			results[m[1]]++
		}
	}
	for what, d := range proxyRun {
		if d != 0 {
			add(what, d)
		}
	}
	host, _ := os.Hostname()
	fmt.Printf("Machine: %d CPUs (%s, %s/%s). Tests passed %d, failed %d.\n\n", runtime.NumCPU(), host, runtime.GOOS, runtime.GOARCH, results["PASS"], results["FAIL"])
	fmt.Println("| fault | runs | blind p50 | p99 | max | within 2 s |")
	fmt.Println("|---|---|---|---|---|---|")
	for _, f := range faults {
		slices.Sort(f.times)
		within := 0
		for _, d := range f.times {
			if d <= 2*time.Second {
				within++
			}
		}
		fmt.Printf("| %s | %d | %s | %s | %s | %d/%d |\n", f.name, len(f.times),
			ms(pct(f.times, 50)), ms(pct(f.times, 99)), ms(f.times[len(f.times)-1]), within, len(f.times))
	}
	fmt.Printf("\nQueries the frontends failed to answer, over every run: %d of %d.\n", failed, sent)
	if len(watchCost) > 0 {
		fmt.Printf("Detection cost per idle frontend, counted by the etcd members (mean of %d runs): %.2f requests/s on its watch stream (progress requests), %.2f one-key serializable reads/s (the lag probe).\n",
			len(watchCost), mean(watchCost), mean(readCost))
	}
}

// pct is the nearest-rank percentile of sorted ds.
func pct(ds []time.Duration, p int) time.Duration {
	i := (p*len(ds) + 99) / 100
	return ds[max(i, 1)-1]
}

func ms(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 0, 64) + " ms"
}

func dur(s string) time.Duration {
	d, err := time.ParseDuration(strings.ReplaceAll(s, "µ", "u"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "faults:", err)
		os.Exit(1)
	}
	return d
}

func atoi(s string) int     { n, _ := strconv.Atoi(s); return n }
func atof(s string) float64 { f, _ := strconv.ParseFloat(s, 64); return f }

func mean(v []float64) float64 {
	s := 0.0
	for _, x := range v {
		s += x
	}
	return s / float64(len(v))
}
