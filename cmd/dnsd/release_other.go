//go:build !linux

package main

func releaseStartupPages() int64 { return 0 }
