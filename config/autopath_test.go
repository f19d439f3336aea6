package config

import (
	"strings"
	"testing"
)

// Autopath is off unless asked for: every form changes what some name
// answers.
func TestAutopathSettings(t *testing.T) {
	c, err := load(t, nil, all()...)
	if err != nil {
		t.Fatal(err)
	}
	if d := c.Dnsd; d.AutopathSuffix || d.AutopathOption || d.AutopathClient || d.AutopathOptionCode != 65001 {
		t.Errorf("autopath defaults: %+v", d)
	}
	c, err = load(t, []string{"--dnsd.autopath-suffix", "--dnsd.autopath-option", "--dnsd.autopath-option-code", "65100", "--dnsd.autopath-client"}, all()...)
	if err != nil {
		t.Fatal(err)
	}
	if d := c.Dnsd; !d.AutopathSuffix || !d.AutopathOption || !d.AutopathClient || d.AutopathOptionCode != 65100 {
		t.Errorf("autopath flags: %+v", d)
	}
	for _, args := range [][]string{
		{"--dnsd.autopath-option-code", "15"}, // Extended DNS Errors since RFC 8914
		{"--dnsd.autopath-option-code", "65535"},
		{"--dnsd.autopath-option-code", "70000"},
		{"--dnsd.autopath-option", "--dnsd.autopath-option-code", "65002", "--dnsd.source-cluster-option", "65002"},
		{"--dnsd.autopath-suffix", "--dnsd.zones", "k8s.io"},
		{"--dnsd.autopath-suffix", "--dnsd.zones", "x.ap.k8s.io"},
	} {
		_, err := load(t, args, all()...)
		if err == nil || !strings.Contains(err.Error(), "dnsd.autopath-") {
			t.Errorf("%v: error %v; want one naming the autopath setting", args, err)
		}
	}
}
