//go:build !linux

package main

import "errors"

// pageOutImage is Linux's alone (see pageout_linux.go).
func pageOutImage() (before, after int64, err error) {
	return 0, 0, errors.ErrUnsupported
}
