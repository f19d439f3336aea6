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
// PAGEOUT leaves a page that another process maps too: another dnsd from
// the same image on the node, or a sidecar started from it. MADV_DONTNEED
// then unmaps what is left from this process alone; the page cache keeps
// the pages for the others, and a page used again costs a minor fault.
// DONTNEED would throw away a page's private copy, so it is given only to
// mappings that hold none (a PIE binary's relocated read-only data does).
//
// It returns the process's file-backed resident memory before and after.
func pageOutImage() (before, after int64, err error) {
	maps, err := imageMappings()
	if err != nil {
		return 0, 0, err
	}
	before = residentFile()
	err = pageOut(maps)
	return before, residentFile(), err
}

// pageOut gives the kernel the advice above for each mapping.
func pageOut(maps []mapping) error {
	for _, m := range maps {
		// Neither of the first two changes what the pages hold, so a
		// kernel without one (MADV_PAGEOUT is Linux 5.4) only costs the
		// saving.
		if err := madvise(m, unix.MADV_RANDOM); err != nil {
			return fmt.Errorf("madvise(MADV_RANDOM): %w", err)
		}
		if err := madvise(m, unix.MADV_PAGEOUT); err != nil {
			return fmt.Errorf("madvise(MADV_PAGEOUT): %w", err)
		}
		if m.anonymous == 0 {
			if err := madvise(m, unix.MADV_DONTNEED); err != nil {
				return fmt.Errorf("madvise(MADV_DONTNEED): %w", err)
			}
		}
	}
	return nil
}

// mapping is one address range [start, end) and how many bytes of it are
// the process's own copies of the file's pages (smaps' Anonymous).
type mapping struct {
	start, end uintptr
	anonymous  int64
}

func madvise(m mapping, advice int) error {
	if _, _, e := unix.Syscall(unix.SYS_MADVISE, m.start, m.end-m.start, uintptr(advice)); e != 0 {
		return e
	}
	return nil
}

// imageMappings is where dnsd's binary is mapped without write
// permission: its code and read-only data. The writable data segment is
// left alone: its pages are the process's own copies.
func imageMappings() ([]mapping, error) {
	return readOnlyMappings(reflect.ValueOf(imageMappings).Pointer())
}

// readOnlyMappings is every mapping, read-only, of the file whose mapping
// holds address pc, as /proc/self/smaps shows them. The file is told by
// the device and inode smaps gives, not by a stat of /proc/self/exe: in a
// container the binary is on overlayfs, and kernels have differed in
// whether smaps shows the overlay's file or the layer's beneath it.
func readOnlyMappings(pc uintptr) ([]mapping, error) {
	b, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		return nil, err
	}
	type region struct {
		mapping
		file     string // major:minor inode; "" when anonymous
		writable bool
	}
	var regions []region
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		if strings.HasSuffix(f[0], ":") {
			// A field of the region above: "Anonymous: 4 kB".
			if f[0] == "Anonymous:" && len(regions) > 0 && len(f) == 3 {
				kb, err := strconv.ParseInt(f[1], 10, 64)
				if err != nil {
					return nil, fmt.Errorf("/proc/self/smaps: unreadable %q", sc.Text())
				}
				regions[len(regions)-1].anonymous = kb << 10
			}
			continue
		}
		// A region: start-end perms offset major:minor inode [path]
		if len(f) < 5 {
			return nil, fmt.Errorf("/proc/self/smaps: unreadable region %q", sc.Text())
		}
		lo, hi, _ := strings.Cut(f[0], "-")
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 != nil || err2 != nil || end <= start {
			return nil, fmt.Errorf("/proc/self/smaps: unreadable range %q", f[0])
		}
		r := region{mapping: mapping{start: uintptr(start), end: uintptr(end)}, writable: strings.Contains(f[1], "w")}
		if f[4] != "0" {
			r.file = f[3] + " " + f[4]
		}
		regions = append(regions, r)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	i := slices.IndexFunc(regions, func(r region) bool { return r.file != "" && r.start <= pc && pc < r.end })
	if i < 0 {
		return nil, fmt.Errorf("/proc/self/smaps shows no file mapping holding %#x", pc)
	}
	var out []mapping
	for _, r := range regions {
		if r.file == regions[i].file && !r.writable {
			out = append(out, r.mapping)
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
