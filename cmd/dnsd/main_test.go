package main

import (
	"strings"
	"testing"
)

// dnsd --help lists the settings dnsd reads: the embedded etcd's client
// URL, which it dials, and not what only the publisher's embedded etcd
// is started with.
func TestHelpListsWhatDnsdReads(t *testing.T) {
	usage := command().Flags().FlagUsages()
	if !strings.Contains(usage, "--etcd.embedded.client-url") || !strings.Contains(usage, "--dnsd.listen") {
		t.Errorf("help lacks settings dnsd reads:\n%s", usage)
	}
	for _, k := range publisherOnly {
		if strings.Contains(usage, "--"+k) {
			t.Errorf("help lists %s, which only the publisher reads", k)
		}
	}
}
