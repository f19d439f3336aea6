package main

import (
	"errors"
	"reflect"
	"syscall"
	"testing"
)

func TestImageMappingsHoldTheCode(t *testing.T) {
	maps, err := imageMappings()
	if err != nil {
		t.Fatal(err)
	}
	// A Go binary maps its code and its read-only data apart.
	if len(maps) < 2 {
		t.Errorf("mappings %v, want the code's and the read-only data's", maps)
	}
	pc := reflect.ValueOf(imageMappings).Pointer()
	for _, m := range maps {
		if m.start <= pc && pc < m.end {
			return
		}
	}
	t.Errorf("no mapping of %v holds imageMappings' code at %#x", maps, pc)
}

// The test binary starts as dnsd does: the runtime and every package's
// init fault in most of its image. Paging it out gives most of that back,
// and the code goes on running from pages read in again.
func TestPageOutImage(t *testing.T) {
	before, after, err := pageOutImage()
	if errors.Is(err, syscall.EINVAL) {
		t.Skipf("the kernel has no MADV_PAGEOUT: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("file-backed RSS %d KiB -> %d KiB", before>>10, after>>10)
	if before <= 0 || after < 0 {
		t.Fatalf("RssFile before %d, after %d: want both read", before, after)
	}
	if after > before/2 {
		t.Errorf("RssFile %d KiB after paging the image out, want at most half of the %d KiB before", after>>10, before>>10)
	}
	if got := residentFile(); got <= 0 {
		t.Errorf("RssFile %d after, want the pages still running this test counted", got)
	}
}
