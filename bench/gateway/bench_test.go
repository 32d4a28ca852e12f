package gateway_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/bench/engine"
)

// instant serves every job at once: the benchmark measures the path, not
// the engine.
type instant struct{}

func (instant) Serve(_ context.Context, _ *engine.Job, first func()) error {
	first()
	return nil
}

// BenchmarkGatewayVsDirect measures a streamed 8k-token /v1/completions
// request through the gateway and the picker (routing, echo, response
// path) against the same request sent straight to the engine's front,
// interleaved in one run: the ratio is the figure to read on a shared
// machine.
func BenchmarkGatewayVsDirect(b *testing.B) {
	e := newEnvWith(b, func(*engine.Engine) engine.Backend { return instant{} }, nil, nil)
	body := completions("m", 8192, 16, true)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	do := func(url string) time.Duration {
		t0 := time.Now()
		resp, err := client.Post(url+"/v1/completions", "application/json", strings.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		n, err := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 || n == 0 {
			b.Fatalf("status %d, %d bytes, %v", resp.StatusCode, n, err)
		}
		<-e.served
		return time.Since(t0)
	}
	direct := "http://" + e.fronts[0]
	var viaGW, straight time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		viaGW += do(e.url)
		straight += do(direct)
	}
	b.ReportMetric(float64(viaGW.Nanoseconds())/float64(b.N), "gateway-ns/req")
	b.ReportMetric(float64(straight.Nanoseconds())/float64(b.N), "direct-ns/req")
	b.ReportMetric(float64(viaGW)/float64(straight), "ratio")
	if n := e.rt.ActiveRequests(); n != 0 {
		b.Fatalf("%d requests still active", n)
	}
}
