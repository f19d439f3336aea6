package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// pageOutImage hands the pages of dnsd's own binary back to the kernel
// once the first load is done.
//
// Starting touches most of the binary: every package's init, the
// configuration, the dial and the load run once and never again, and the
// kernel maps each fault's neighbours with it, so a dnsd at 10k records
// held 17 MiB of its 19 MiB of code and read-only data mapped, two thirds
// of its RSS. What answering and watching use afterwards is a fraction of
// that (bench/README.md). MADV_PAGEOUT drops the clean pages only this
// process maps, from the page cache too, so the node gets the memory
// back, not just a smaller RSS figure; MADV_RANDOM first, so that a page
// used again is read alone instead of with a readahead window of pages
// that are not. The price is a disk read the first time each page is used
// again: a few milliseconds in all on the first queries.
//
// It returns the process's file-backed resident memory before and after.
func pageOutImage() (before, after int64, err error) {
	maps, err := imageMappings()
	if err != nil {
		return 0, 0, err
	}
	before = residentFile()
	for _, m := range maps {
		// Neither advice changes what the pages hold, so a kernel without
		// one (MADV_PAGEOUT is Linux 5.4) only costs the saving.
		if err := madvise(m, unix.MADV_RANDOM); err != nil {
			return before, before, fmt.Errorf("madvise(MADV_RANDOM): %w", err)
		}
		if err := madvise(m, unix.MADV_PAGEOUT); err != nil {
			return before, before, fmt.Errorf("madvise(MADV_PAGEOUT): %w", err)
		}
	}
	return before, residentFile(), nil
}

// mapping is one address range [start, end).
type mapping struct{ start, end uintptr }

func madvise(m mapping, advice int) error {
	if _, _, e := unix.Syscall(unix.SYS_MADVISE, m.start, m.end-m.start, uintptr(advice)); e != 0 {
		return e
	}
	return nil
}

// imageMappings is where /proc/self/maps shows dnsd's binary mapped
// without write permission: its code and read-only data. The writable
// data segment is left alone: its pages are the process's own copies.
// The binary is the file whose mapping holds this function's code, told
// by the device and inode maps gives it, not by a stat of /proc/self/exe:
// in a container the binary is on overlayfs, and kernels have differed in
// whether maps shows the overlay's file or the layer's beneath it.
func imageMappings() ([]mapping, error) {
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return nil, err
	}
	type line struct {
		mapping
		file     string // major:minor inode
		writable bool
	}
	var lines []line
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		// start-end perms offset major:minor inode path
		f := strings.Fields(sc.Text())
		if len(f) < 6 || f[4] == "0" {
			continue // anonymous
		}
		lo, hi, _ := strings.Cut(f[0], "-")
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 != nil || err2 != nil || end <= start {
			return nil, fmt.Errorf("/proc/self/maps: unreadable range %q", f[0])
		}
		lines = append(lines, line{mapping{uintptr(start), uintptr(end)}, f[3] + " " + f[4], strings.Contains(f[1], "w")})
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	pc := reflect.ValueOf(imageMappings).Pointer()
	i := slices.IndexFunc(lines, func(l line) bool { return l.start <= pc && pc < l.end })
	if i < 0 {
		return nil, fmt.Errorf("/proc/self/maps shows no file mapping holding the code at %#x", pc)
	}
	var out []mapping
	for _, l := range lines {
		if l.file == lines[i].file && !l.writable {
			out = append(out, l.mapping)
		}
	}
	return out, nil
}

// residentFile is the process's file-backed resident memory (RssFile in
// /proc/self/status) in bytes, or -1 when it cannot be read.
func residentFile() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return -1
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "RssFile:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				return -1
			}
			return kb << 10
		}
	}
	return -1
}
