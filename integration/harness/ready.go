package harness

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/miekg/dns"
)

// Metric is the value of the unlabelled sample name on base's /metrics
// (base: http://host:port), or -1 when it cannot be read within 5 s: a
// bench reading a thousand starved processes must not wait on each for
// ever (the 16-core fleet run of stop 37 timed out so).
func Metric(base, name string) float64 {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	if err != nil {
		return -1
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
				return f
			}
		}
	}
	return -1
}

// HTTPOK returns nil if GET url answers 200 OK, for use as a readyCheck.
func HTTPOK(url string) error {
	return getOK(http.DefaultClient, url, "")
}

// getOK returns nil if GET url, with an optional bearer token, answers 200.
func getOK(client *http.Client, url, token string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return nil
}

// DNSAlive reports whether a DNS server answers on addr over UDP. Any answer,
// whatever its rcode, means it is serving.
func DNSAlive(addr string) error {
	m := new(dns.Msg)
	m.SetQuestion(".", dns.TypeSOA)
	client := &dns.Client{Net: "udp", Timeout: 500 * time.Millisecond}
	_, _, err := client.Exchange(m, addr)
	return err
}
