package keys_test

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestREADMEExamplesAreReal: every key/value pair README.md shows must be a
// pair the record builders produce (their golden files), so the document
// cannot drift from the code.
func TestREADMEExamplesAreReal(t *testing.T) {
	real := map[string]bool{}
	goldens, _ := filepath.Glob("kube/testdata/*.golden")
	stubs, _ := filepath.Glob("testdata/*.golden")
	goldens = append(goldens, stubs...)
	for _, g := range goldens {
		b, err := os.ReadFile(g)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		for i := 0; i+1 < len(lines); i += 2 {
			real[lines[i]+"\n"+lines[i+1]] = true
		}
	}
	f, err := os.Open("README.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var prev string
	shown := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "{") && strings.HasPrefix(prev, "/skydns") {
			shown++
			if !real[prev+"\n"+line] {
				t.Errorf("README.md shows a pair no builder produces:\n%s\n%s", prev, line)
			}
		}
		prev = line
	}
	if shown < 20 {
		t.Errorf("README.md shows %d example pairs; expected every record of specs 000 and 001", shown)
	}
}
