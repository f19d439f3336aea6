//go:build bench

package dnsdbench

import (
	"encoding/binary"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"
)

// tcpOutstanding is dnsperf's default -q: queries in flight over all
// connections.
const tcpOutstanding = 100

// perfRun is what one load run found.
type perfRun struct {
	qps            float64
	answered, lost int
	lat            []float64 // ms per answered query, at a fixed rate
}

// tcpperf stands in for "dnsperf -m tcp" on the SRV mix. The packaged
// dnsperf (2.10) reads TCP responses into a 16 KiB buffer and aborts or
// loses every query once an answer is larger, and the SRV answer of a
// 250-endpoint service is 17 KB (dnsd) to 35 KB (CoreDNS, uncompressed). It loads the
// server the way dnsperf does: clients connections, queries pipelined on
// them with at most 100 in flight in all, each response matched to its query
// by ID; at most rate queries a second if rate > 0, timing each one then.
// Responses are not parsed: reading them is all the client work there is.
func tcpperf(addr string, qs []query, clients int, duration time.Duration, rate int) (perfRun, error) {
	var wires [][]byte
	for _, q := range qs {
		m := new(dns.Msg).SetQuestion(q.name, q.qtype)
		b, err := m.Pack()
		if err != nil {
			return perfRun{}, err
		}
		wires = append(wires, append(binary.BigEndian.AppendUint16(nil, uint16(len(b))), b...)) // length-prefixed

	}
	conns := make([]net.Conn, clients)
	for i := range conns {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			return perfRun{}, err
		}
		defer c.Close()
		conns[i] = c
	}

	var (
		inflight = make(chan struct{}, tcpOutstanding)
		seq      atomic.Int64 // queries begun over all connections, for pacing
		mu       sync.Mutex
		run      perfRun
		wg       sync.WaitGroup
		start    = time.Now()
		stop     = start.Add(duration)
	)
	for _, c := range conns {
		var (
			sentAt         [1 << 16]atomic.Int64 // by query ID, ns since start
			sent, received atomic.Int64
			stopped        atomic.Bool
			readerDone     = make(chan struct{})
		)
		wg.Go(func() { // sender
			msg := make([]byte, 0, 512)
			for id := uint16(0); ; id++ {
				inflight <- struct{}{}
				n := seq.Add(1) - 1
				if rate > 0 {
					time.Sleep(time.Until(start.Add(time.Duration(n) * time.Second / time.Duration(rate))))
				}
				if time.Now().After(stop) {
					<-inflight
					break
				}
				msg = append(msg[:0], wires[int(n)%len(wires)]...)
				binary.BigEndian.PutUint16(msg[2:], id)
				sentAt[id].Store(int64(time.Since(start)))
				if _, err := c.Write(msg); err != nil {
					<-inflight
					break
				}
				sent.Add(1)
			}
			// Wait for what is still in flight on this connection, for at
			// most 2s (dnsperf's timeout is 5s), then close it.
			stopped.Store(true)
			if received.Load() != sent.Load() {
				select {
				case <-readerDone:
				case <-time.After(2 * time.Second):
				}
			}
			c.Close()
			mu.Lock()
			run.lost += int(sent.Load() - received.Load())
			mu.Unlock()
		})
		wg.Go(func() { // reader
			defer close(readerDone)
			buf := make([]byte, 1<<16)
			for {
				if _, err := io.ReadFull(c, buf[:2]); err != nil {
					return
				}
				n := binary.BigEndian.Uint16(buf)
				if _, err := io.ReadFull(c, buf[:n]); err != nil || n < 12 {
					return
				}
				took := time.Since(start) - time.Duration(sentAt[binary.BigEndian.Uint16(buf)].Load())
				<-inflight
				mu.Lock()
				run.answered++
				if rate > 0 {
					run.lat = append(run.lat, float64(took)/float64(time.Millisecond))
				}
				mu.Unlock()
				// The sender checks the same two counts after it stops, so
				// one of them sees the last answer.
				if received.Add(1) == sent.Load() && stopped.Load() {
					return
				}
			}
		})
	}
	wg.Wait()
	run.qps = float64(run.answered) / time.Since(start).Seconds()
	return run, nil
}
