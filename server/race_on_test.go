//go:build race

package server

// raceEnabled: the race detector is on. Its sync.Pool drops a quarter of
// what is put back, on purpose, so a pooled buffer costs an allocation
// now and then and counts of allocations say nothing.
const raceEnabled = true
