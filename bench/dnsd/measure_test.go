//go:build bench

package dnsdbench

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/etcdns/etcdns/integration/harness"
)

// result is one server's figures on one mix, over all rounds.
type result struct {
	qps      []float64 // per round, at max throughput
	cpu      float64   // server CPU seconds, summed over the throughput runs
	storeCPU float64   // its store's CPU seconds in the same windows
	answered float64   // queries answered in the throughput runs
	lat      []float64 // ms, every answered query of the fixed-rate runs
	p99s     []float64 // ms, each fixed-rate run's own p99
	lost     int       // in both runs
}

// measure loads s twice, alone on the machine's DNS side: at max
// throughput (QPS, CPU time) and at the mix's fixed rate, well below every
// server's capacity, for the latency of each query (at max throughput,
// latency is mostly time spent queueing). Both add to s.res[m.name], which
// it returns with the queries these two runs lost.
func (s *server) measure(t *testing.T, dnsperf string, m *mix, clients, duration int) (r *result, lost int) {
	r = s.res[m.name]
	if r == nil {
		r = &result{}
		s.res[m.name] = r
	}
	lost0 := r.lost
	cpu0, store0 := cpuSeconds(s.proc), cpuSeconds(s.stores...)
	run := load(t, dnsperf, s.addr, m, clients, duration, false)
	r.cpu += cpuSeconds(s.proc) - cpu0
	r.storeCPU += cpuSeconds(s.stores...) - store0
	r.qps = append(r.qps, run.qps)
	r.answered += float64(run.answered)
	r.lost += run.lost

	run = load(t, dnsperf, s.addr, m, clients, duration, true)
	r.lost += run.lost
	r.lat = append(r.lat, run.lat...)
	r.p99s = append(r.p99s, percentile(slices.Sorted(slices.Values(run.lat)), 0.99))
	return r, r.lost - lost0
}

var (
	reQPS       = regexp.MustCompile(`Queries per second:\s+([0-9.]+)`)
	reLost      = regexp.MustCompile(`Queries lost:\s+([0-9]+)`)
	reCompleted = regexp.MustCompile(`Queries completed:\s+([0-9]+)`)
)

// load runs dnsperf, or tcpperf for a TCP mix, for duration seconds, at
// max throughput or at the mix's fixed rate.
func load(t *testing.T, dnsperf, addr string, m *mix, clients, duration int, fixedRate bool) perfRun {
	rate := 0
	if fixedRate {
		rate = m.rate
	}
	if m.tcp {
		run, err := tcpperf(addr, m.queries, clients, time.Duration(duration)*time.Second, rate)
		if err != nil {
			t.Fatalf("tcpperf against %s: %v", addr, err)
		}
		return run
	}
	host, port, _ := strings.Cut(addr, ":")
	args := []string{"-s", host, "-p", port, "-d", m.file, "-c", strconv.Itoa(clients), "-l", strconv.Itoa(duration)}
	if fixedRate {
		args = append(args, "-Q", strconv.Itoa(rate), "-v")
	}
	// dnsperf writes to a file, not to a pipe read by this process: with
	// -v it prints a line per answer, each in a write of its own, and
	// reading them woke this process 10,000 times a second, for about
	// half a CPU taken from the server and dnsperf during the very runs
	// that time their latency.
	f, err := os.CreateTemp("", "dnsperf-*.out")
	if err != nil {
		t.Fatal(err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	cmd := exec.Command(dnsperf, args...)
	cmd.Stdout, cmd.Stderr = f, f
	err = cmd.Run()
	out, rerr := os.ReadFile(f.Name())
	if err != nil || rerr != nil {
		t.Fatalf("dnsperf %s: %v\n%s", strings.Join(args, " "), errors.Join(err, rerr), tail(out))
	}
	run := perfRun{qps: parseFloat(t, reQPS, out), lost: int(parseFloat(t, reLost, out)), answered: int(parseFloat(t, reCompleted, out))}
	for _, l := range strings.Split(string(out), "\n") {
		// -v prints "> NOERROR name type 0.000162" for each answered query.
		f := strings.Fields(l)
		if len(f) == 5 && f[0] == ">" {
			if v, err := strconv.ParseFloat(f[4], 64); err == nil {
				run.lat = append(run.lat, v*1000)
			}
		}
	}
	return run
}

func parseFloat(t *testing.T, re *regexp.Regexp, out []byte) float64 {
	m := re.FindSubmatch(out)
	if m == nil {
		t.Fatalf("dnsperf output has no %s:\n%s", re, tail(out))
	}
	v, _ := strconv.ParseFloat(string(m[1]), 64)
	return v
}

func tail(out []byte) []byte { return out[max(0, len(out)-2000):] }

// cpuSeconds is the user plus system time the processes have used so far.
func cpuSeconds(procs ...*harness.Process) float64 {
	total := time.Duration(0)
	for _, p := range procs {
		total += p.CPU()
	}
	return total.Seconds()
}

// peakRSS is the process's high-water resident set size in MiB (VmHWM).
func peakRSS(t *testing.T, p *harness.Process) float64 {
	hwm, ok := p.Memory()["VmHWM"]
	if !ok {
		t.Fatalf("no VmHWM in /proc/%d/status", p.Pid())
	}
	return float64(hwm) / (1 << 20)
}

// median of xs: on two cores shared with dnsperf, one server's QPS swings
// by up to a fifth either way from one run to the next, and the median of
// many short runs is what a few such swings cannot move.
func median(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// pairedRatio is the median over rounds of d's figure over p's (QPS, or a
// run's p99). Each pair of runs is in the same round, so the machine's
// drift over a run (seen here: every server a fifth slower from the fifth
// round on) cancels in each ratio; the ratio of the two medians does not
// cancel it, and can fall on the other side of 1 than nearly every round.
func pairedRatio(d, p []float64) float64 {
	var rs []float64
	for i := range min(len(d), len(p)) {
		rs = append(rs, d[i]/p[i])
	}
	return median(rs)
}

// wins counts the rounds in which d's figure is above p's: each pair of
// runs is in the same round, so it holds the machine's drift constant.
func wins(d, p []float64) int {
	n := 0
	for i := range min(len(d), len(p)) {
		if d[i] > p[i] {
			n++
		}
	}
	return n
}

// percentile of sorted xs, 0 < p < 1.
func percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	return xs[min(len(xs)-1, int(p*float64(len(xs))))]
}

// table is one mix's figures, dnsd first, with dnsd's QPS and p99 ratios
// to each peer (pairedRatio; dnsd/peer) and the rounds dnsd won on each.
func table(t *testing.T, servers []*server, m *mix) (header []string, rows [][]string, notes []string) {
	header = []string{"server", "QPS", "QPS range", "dnsd/peer QPS", "rounds dnsd faster", "p50 ms", "p99 ms", "dnsd/peer p99", "rounds dnsd p99 lower",
		"CPU s/run", "CPU us/query", "store CPU s/run", "peak RSS MiB", "lost"}
	d := servers[0].res[m.name]
	for _, s := range servers {
		r := s.res[m.name]
		slices.Sort(r.lat)
		ratio, won, p99ratio, p99won, store := "-", "-", "-", "-", "-"
		if s != servers[0] {
			ratio = fmt.Sprintf("%.2fx", pairedRatio(d.qps, r.qps))
			won = fmt.Sprintf("%d/%d", wins(d.qps, r.qps), len(r.qps))
			p99ratio = fmt.Sprintf("%.2fx", pairedRatio(d.p99s, r.p99s))
			p99won = fmt.Sprintf("%d/%d", wins(r.p99s, d.p99s), len(r.p99s))
		}
		if len(s.stores) > 0 {
			store = fmt.Sprintf("%.2f", r.storeCPU/float64(len(r.qps)))
		}
		rows = append(rows, []string{s.name, fmt.Sprintf("%.0f", median(r.qps)),
			fmt.Sprintf("%.0f-%.0f", slices.Min(r.qps), slices.Max(r.qps)), ratio, won,
			fmt.Sprintf("%.3f", percentile(r.lat, 0.5)), fmt.Sprintf("%.3f", median(r.p99s)), p99ratio, p99won,
			fmt.Sprintf("%.2f", r.cpu/float64(len(r.qps))), fmt.Sprintf("%.1f", r.cpu/r.answered*1e6), store,
			fmt.Sprintf("%.0f", peakRSS(t, s.proc)), strconv.Itoa(r.lost)})
		if median(r.qps) < 2*float64(m.rate) {
			notes = append(notes, fmt.Sprintf("%s's max QPS is below twice the fixed rate of %d qps: its percentiles include queueing", s.name, m.rate))
		}
	}
	return header, rows, notes
}

// plain renders a table with padded columns, markdown as a Markdown table.
func plain(header []string, rows [][]string) string {
	width := make([]int, len(header))
	for _, r := range append([][]string{header}, rows...) {
		for i, c := range r {
			width[i] = max(width[i], len(c))
		}
	}
	var b strings.Builder
	for _, r := range append([][]string{header}, rows...) {
		for i, c := range r {
			if i == 0 {
				fmt.Fprintf(&b, "%-*s", width[i], c)
			} else {
				fmt.Fprintf(&b, "  %*s", width[i], c)
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}

func markdown(header []string, rows [][]string) string {
	var b strings.Builder
	b.WriteString("| " + strings.Join(header, " | ") + " |\n|" + strings.Repeat(" --- |", len(header)) + "\n")
	for _, r := range rows {
		b.WriteString("| " + strings.Join(r, " | ") + " |\n")
	}
	return b.String()
}
