// Package fuzzcorpus keeps a package's fuzz seed files equal to the seeds
// its tests derive (from README records, hand-picked edges): a test checks
// the files, and the same test with update set rewrites them. Test code
// only.
package fuzzcorpus

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Seed is one seed file: its name under testdata/fuzz/<target>, its
// description for messages, and the fuzz function's arguments ([]byte or
// string each).
type Seed struct {
	Name, Desc string
	Args       []any
}

// File is a seed in the format of go test's corpus files.
func File(args ...any) []byte {
	var b strings.Builder
	b.WriteString("go test fuzz v1\n")
	for _, a := range args {
		switch v := a.(type) {
		case []byte:
			fmt.Fprintf(&b, "[]byte(%q)\n", v)
		case string:
			fmt.Fprintf(&b, "string(%q)\n", v)
		default:
			panic(fmt.Sprintf("seed of type %T", a))
		}
	}
	return []byte(b.String())
}

// Check fails t for each seed of each target whose file under
// testdata/fuzz differs, or, with update, writes them all. rewrite is
// the command that does so, for the message. Files of other names,
// crashers the fuzzer found, are left alone.
func Check(t *testing.T, seeds map[string][]Seed, update bool, rewrite string) {
	t.Helper()
	for target, ss := range seeds {
		dir := filepath.Join("testdata", "fuzz", target)
		if update {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		seen := map[string]bool{}
		for _, s := range ss {
			if seen[s.Name] {
				t.Fatalf("%s: two seeds named %s", target, s.Name)
			}
			seen[s.Name] = true
			path := filepath.Join(dir, s.Name)
			want := File(s.Args...)
			if update {
				if err := os.WriteFile(path, want, 0o644); err != nil {
					t.Fatal(err)
				}
				continue
			}
			if got, err := os.ReadFile(path); err != nil || string(got) != string(want) {
				t.Errorf("%s differs from its seed %q (%s): %v", path, s.Desc, rewrite, err)
			}
		}
	}
}
