package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
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
// and the code goes on running from pages read in again. A second process
// of the same binary, started and left running, maps the same pages, as a
// fleet of frontends on one machine does: they leave this process too.
func TestPageOutImage(t *testing.T) {
	if os.Getenv("ETCDNS_HOLD_IMAGE") == "1" {
		fmt.Println("started")
		io.Copy(io.Discard, os.Stdin) // until the parent closes it
		return
	}
	other := exec.Command(os.Args[0], "-test.run=^TestPageOutImage$")
	other.Env = append(os.Environ(), "ETCDNS_HOLD_IMAGE=1")
	hold, err := other.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := other.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { hold.Close(); other.Wait() }()
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "started\n" {
		t.Fatalf("the second process said %q, %v; want it started", line, err)
	}

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

// A read-only file mapping may hold the process's own copies of pages: a
// PIE binary's data relocated at start and then made read-only. Those
// must survive: reading the file again would undo the relocation.
func TestPageOutKeepsPrivateCopies(t *testing.T) {
	page := os.Getpagesize()
	f, err := os.Create(filepath.Join(t.TempDir(), "image"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(bytes.Repeat([]byte("f"), 2*page)); err != nil {
		t.Fatal(err)
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, 2*page, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mem)
	copy(mem, "relocated") // the first page becomes this process's own
	_ = mem[page]          // the second stays the file's
	if err := unix.Mprotect(mem, unix.PROT_READ); err != nil {
		t.Fatal(err)
	}
	maps, err := readOnlyMappings(uintptr(unsafe.Pointer(&mem[0])))
	if err != nil {
		t.Fatal(err)
	}
	if len(maps) != 1 || maps[0].anonymous != int64(page) {
		t.Fatalf("mappings %+v, want one with one private page of %d bytes", maps, page)
	}
	if err := pageOut(maps); err != nil && !errors.Is(err, syscall.EINVAL) {
		t.Fatal(err)
	}
	if got := string(mem[:9]); got != "relocated" {
		t.Errorf("the private page reads %q after the page-out, want %q", got, "relocated")
	}
}
