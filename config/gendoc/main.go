// Command gendoc writes docs/configuration.md from the settings' definitions
// (config.yaml and the fields of config.Config). go generate ./config runs it;
// config's TestConfigurationDoc fails while the file is out of date.
package main

import (
	"fmt"
	"os"

	"github.com/etcdns/etcdns/config"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: gendoc <output file>")
		os.Exit(2)
	}
	if err := os.WriteFile(os.Args[1], []byte(config.Reference()), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "gendoc:", err)
		os.Exit(1)
	}
}
