package discovery

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
)

// zone is a DNS server on loopback answering from records the test
// changes.
type zone struct {
	mu      sync.Mutex
	records map[uint16][]dns.RR // by question type
	rcode   int
	srv     *dns.Server
}

func startZone(t *testing.T) *zone {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	z := &zone{records: map[uint16][]dns.RR{}}
	started := make(chan struct{})
	z.srv = &dns.Server{PacketConn: pc, Handler: z, NotifyStartedFunc: func() { close(started) }}
	go z.srv.ActivateAndServe()
	<-started
	t.Cleanup(func() { z.srv.Shutdown() })
	return z
}

func (z *zone) addr() string { return z.srv.PacketConn.LocalAddr().String() }

func (z *zone) set(rcode int, rrs ...string) {
	z.mu.Lock()
	defer z.mu.Unlock()
	z.rcode = rcode
	z.records = map[uint16][]dns.RR{}
	for _, s := range rrs {
		rr, err := dns.NewRR(s)
		if err != nil {
			panic(err)
		}
		z.records[rr.Header().Rrtype] = append(z.records[rr.Header().Rrtype], rr)
	}
}

func (z *zone) ServeDNS(w dns.ResponseWriter, req *dns.Msg) {
	z.mu.Lock()
	defer z.mu.Unlock()
	m := new(dns.Msg)
	m.SetReply(req)
	m.Rcode = z.rcode
	q := req.Question[0]
	for _, rr := range z.records[q.Qtype] {
		if rr.Header().Name == q.Name {
			m.Answer = append(m.Answer, rr)
		}
	}
	w.WriteMsg(m)
}

func dnsSource(t *testing.T, z *zone, name string, srv bool) *DNS {
	d := DefaultDefaults()
	d.Model = "llama"
	s, err := NewDNS(DNSConfig{Name: name, SRV: srv, Server: z.addr(), Interval: 1 << 62, Defaults: d})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func resolved(t *testing.T, s *DNS) string {
	t.Helper()
	ws, err := s.Resolve(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	reg := newMemRegistry()
	syn, _ := NewSyncer(SyncConfig{Registry: reg, Sources: []string{"dns"}})
	syn.Report("dns", ws)
	if r := syn.Sync(context.Background()); len(r.Errors) > 0 {
		t.Fatal(r.Errors)
	}
	return reg.String()
}

// SRV records name the workers by target, so a pod that returns with a new
// address keeps its id; A records name them by address.
func TestDNSSRV(t *testing.T) {
	z := startZone(t)
	s := dnsSource(t, z, "_http._tcp.vllm.llm.svc", true)
	z.set(dns.RcodeSuccess,
		"_http._tcp.vllm.llm.svc. 5 IN SRV 0 50 8000 vllm-0.vllm.llm.svc.",
		"_http._tcp.vllm.llm.svc. 5 IN SRV 0 50 8000 vllm-1.vllm.llm.svc.",
		"vllm-0.vllm.llm.svc. 5 IN A 10.0.0.1",
		"vllm-1.vllm.llm.svc. 5 IN AAAA fd00::2")
	if got, want := resolved(t, s), "vllm-0.vllm.llm.svc=10.0.0.1:8000(discovery) vllm-1.vllm.llm.svc=[fd00::2]:8000(discovery)"; got != want {
		t.Fatalf("got %q; want %q", got, want)
	}
	z.set(dns.RcodeSuccess,
		"_http._tcp.vllm.llm.svc. 5 IN SRV 0 50 8000 vllm-0.vllm.llm.svc.",
		"vllm-0.vllm.llm.svc. 5 IN A 10.0.0.7")
	if got, want := resolved(t, s), "vllm-0.vllm.llm.svc=10.0.0.7:8000(discovery)"; got != want {
		t.Fatalf("got %q; want %q", got, want)
	}
}

func TestDNSA(t *testing.T) {
	z := startZone(t)
	s := dnsSource(t, z, "vllm.llm.svc", false)
	z.set(dns.RcodeSuccess, "vllm.llm.svc. 5 IN A 10.0.0.2", "vllm.llm.svc. 5 IN A 10.0.0.1")
	if got, want := resolved(t, s), "10.0.0.1=10.0.0.1:8000(discovery) 10.0.0.2=10.0.0.2:8000(discovery)"; got != want {
		t.Fatalf("got %q; want %q", got, want)
	}
	ws, err := s.Resolve(context.Background())
	if err != nil || ws[0].KvEventsEndpoint != "tcp://10.0.0.1:5557" || ws[0].ReplayEndpoint != "tcp://10.0.0.1:5558" {
		t.Fatalf("worker %v %v; want events at 5557 and replay at 5558", ws, err)
	}
	// No such name: no workers. A failing server: an error, so the last
	// report stands.
	z.set(dns.RcodeNameError)
	if got := resolved(t, s); got != "" {
		t.Fatalf("NXDOMAIN: %q; want no workers", got)
	}
	z.set(dns.RcodeServerFailure)
	if _, err := s.Resolve(context.Background()); !errors.Is(err, ErrDNS) {
		t.Fatalf("SERVFAIL: %v; want ErrDNS", err)
	}
}

// A look counts the workers it found and the SRV targets it skipped for
// having no address; a failed look is counted and reports nothing.
func TestDNSMetrics(t *testing.T) {
	z := startZone(t)
	z.set(dns.RcodeSuccess,
		"_http._tcp.vllm.llm.svc. 5 IN SRV 0 50 8000 vllm-0.vllm.llm.svc.",
		"_http._tcp.vllm.llm.svc. 5 IN SRV 0 50 8000 vllm-1.vllm.llm.svc.",
		"vllm-0.vllm.llm.svc. 5 IN A 10.0.0.1")
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	d := DefaultDefaults()
	d.Model = "llama"
	run := func() <-chan []*kvrouterv1.Worker {
		s, err := NewDNS(DNSConfig{Name: "_http._tcp.vllm.llm.svc", SRV: true, Server: z.addr(), Interval: 1 << 62, Defaults: d, Metrics: m})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		reports := make(chan []*kvrouterv1.Worker, 1)
		done := make(chan struct{})
		go func() { defer close(done); s.Run(ctx, func(ws []*kvrouterv1.Worker) { reports <- ws }) }()
		t.Cleanup(func() { cancel(); <-done })
		return reports
	}
	if ws := <-run(); len(ws) != 1 {
		t.Fatalf("reported %d workers; want 1", len(ws))
	}
	if w, s := testutil.ToFloat64(m.workers.WithLabelValues("dns")), testutil.ToFloat64(m.skipped.WithLabelValues("dns")); w != 1 || s != 1 {
		t.Fatalf("workers %v skipped %v; want 1 and 1", w, s)
	}
	z.set(dns.RcodeServerFailure)
	reports := run()
	eventually(t, "the failed look counted", func() bool { return testutil.ToFloat64(m.failures.WithLabelValues("dns")) == 1 })
	select {
	case ws := <-reports:
		t.Fatalf("a failed look reported %v", ws)
	default:
	}
}
