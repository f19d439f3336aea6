package etcdns

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// make fuzz runs every fuzz target: one added without its line in the
// Makefile was never run (two were, until this test).
func TestMakeFuzzRunsEveryTarget(t *testing.T) {
	makefile, err := os.ReadFile("Makefile")
	if err != nil {
		t.Fatal(err)
	}
	fuzz := regexp.MustCompile(`(?m)^func (Fuzz\w+)\(`)
	found := 0
	err = filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && strings.HasPrefix(d.Name(), ".") && path != "." {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range fuzz.FindAllStringSubmatch(string(src), -1) {
			found++
			line := "-fuzz '^" + m[1] + "$$' -fuzztime $(FUZZTIME) $(FUZZFLAGS) ./" + filepath.Dir(path) + "\n"
			if !strings.Contains(string(makefile), line) {
				t.Errorf("%s (%s) is not run by make fuzz: want a line ending %q", m[1], path, line)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if found == 0 {
		t.Error("no fuzz target found")
	}
}
