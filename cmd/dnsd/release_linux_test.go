package main

import (
	"os"
	"strconv"
	"strings"
	"testing"
)

// rssFile is the process's resident pages of files (its binary's mostly).
func rssFile(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skip(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "RssFile:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Skip("no RssFile in /proc/self/status")
	return 0
}

func TestReleaseStartupPages(t *testing.T) {
	before := rssFile(t)
	released := releaseStartupPages()
	after := rssFile(t)
	// The test binary's code and read-only data are mapped, and some of
	// them resident: all of that is released, and what this test runs
	// next faults back in.
	if released == 0 {
		t.Fatal("released no mapping of the executable")
	}
	if after >= before {
		t.Errorf("RssFile %d before, %d after releasing %d bytes of mappings", before, after, released)
	}
	t.Logf("RssFile %d KiB -> %d KiB; %d KiB of mappings released", before>>10, after>>10, released>>10)
}
