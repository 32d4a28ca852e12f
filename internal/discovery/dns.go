package discovery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/miekg/dns"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
)

// ErrDNS: the name could not be resolved (not: it has no records, which
// is an empty fleet).
var ErrDNS = errors.New("dns discovery")

// DNSConfig configures a DNS source.
type DNSConfig struct {
	// Name is resolved on each poll: with SRV, each record's target and
	// port is a worker named by its target (a StatefulSet's headless
	// service gives each pod a stable name); with A/AAAA, each address is a
	// worker named by it, serving on Defaults.Port.
	Name string
	SRV  bool
	// Server is the DNS server, host:port; required.
	Server string
	// Interval between polls; required.
	Interval time.Duration
	// Timeout of one query (default 2s).
	Timeout time.Duration
	// Defaults give the model (required) and the other fields.
	Defaults Defaults
	Logger   *slog.Logger
	// Metrics count the records found and skipped; nil counts nothing.
	Metrics *Metrics
}

// DNS is a Source of the workers a DNS name resolves to.
type DNS struct {
	cfg    DNSConfig
	log    *slog.Logger
	client *dns.Client
}

// NewDNS returns a DNS source for cfg.
func NewDNS(cfg DNSConfig) (*DNS, error) {
	switch {
	case cfg.Name == "":
		return nil, errors.New("discovery: DNSConfig.Name is required")
	case cfg.Server == "":
		return nil, errors.New("discovery: DNSConfig.Server is required")
	case cfg.Interval <= 0:
		return nil, errors.New("discovery: DNSConfig.Interval must be > 0")
	case cfg.Defaults.Model == "":
		return nil, errors.New("discovery: DNS discovery needs a model")
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 2 * time.Second
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &DNS{cfg: cfg, log: log, client: &dns.Client{Timeout: cfg.Timeout}}, nil
}

// Name is "dns".
func (d *DNS) Name() string { return "dns" }

// Run polls every Interval until ctx is done; a failed poll is logged and
// reports nothing.
func (d *DNS) Run(ctx context.Context, report func([]*kvrouterv1.Worker)) error {
	t := time.NewTicker(d.cfg.Interval)
	defer t.Stop()
	for {
		if ws, skipped, err := d.resolve(ctx); err != nil {
			d.log.Warn("discovery: not reporting", "source", d.Name(), "err", err)
			d.cfg.Metrics.failed(d.Name())
		} else {
			d.cfg.Metrics.looked(d.Name(), len(ws), skipped)
			report(ws)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Resolve looks the name up once and returns its workers, sorted by id.
func (d *DNS) Resolve(ctx context.Context) ([]*kvrouterv1.Worker, error) {
	ws, _, err := d.resolve(ctx)
	return ws, err
}

// resolve is Resolve that also counts the SRV targets it skipped for
// having no address.
func (d *DNS) resolve(ctx context.Context) (_ []*kvrouterv1.Worker, skipped int, _ error) {
	name := dns.Fqdn(d.cfg.Name)
	var out []*kvrouterv1.Worker
	if !d.cfg.SRV {
		ips, err := d.addrs(ctx, name, nil)
		if err != nil {
			return nil, 0, err
		}
		for _, ip := range ips {
			out = append(out, d.worker(ip, ip, d.cfg.Defaults.Port))
		}
		return out, 0, nil
	}
	resp, err := d.query(ctx, name, dns.TypeSRV)
	if err != nil {
		return nil, 0, err
	}
	for _, rr := range resp.Answer {
		srv, ok := rr.(*dns.SRV)
		if !ok {
			continue
		}
		ips, err := d.addrs(ctx, srv.Target, resp.Extra)
		if err != nil {
			return nil, 0, err
		}
		if len(ips) == 0 {
			d.log.Warn("discovery: SRV target has no address", "target", srv.Target)
			skipped++
			continue
		}
		out = append(out, d.worker(strings.TrimSuffix(srv.Target, "."), ips[0], int(srv.Port)))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].WorkerId < out[j].WorkerId })
	return out, skipped, nil
}

func (d *DNS) worker(id, ip string, port int) *kvrouterv1.Worker {
	df := d.cfg.Defaults
	w := &kvrouterv1.Worker{WorkerId: id, Model: df.Model, Endpoint: net.JoinHostPort(ip, strconv.Itoa(port)),
		DpSize: max(df.DPSize, 1), BlockSize: df.BlockSize, Topic: df.Topic}
	if df.KVEventsPort > 0 {
		w.KvEventsEndpoint = "tcp://" + net.JoinHostPort(ip, strconv.Itoa(df.KVEventsPort))
		if rp := df.KVEventsPort + int(w.DpSize); !df.ReplayOff && rp <= 65535 {
			w.ReplayEndpoint = "tcp://" + net.JoinHostPort(ip, strconv.Itoa(rp))
		}
	}
	return w
}

// addrs is name's addresses, IPv4 then IPv6, from extra when it holds
// them (an SRV answer's additional section) or else queried, sorted.
func (d *DNS) addrs(ctx context.Context, name string, extra []dns.RR) ([]string, error) {
	var v4, v6 []string
	collect := func(rrs []dns.RR) {
		for _, rr := range rrs {
			if !strings.EqualFold(rr.Header().Name, name) {
				continue
			}
			switch a := rr.(type) {
			case *dns.A:
				v4 = append(v4, a.A.String())
			case *dns.AAAA:
				v6 = append(v6, a.AAAA.String())
			}
		}
	}
	collect(extra)
	if len(v4)+len(v6) == 0 {
		for _, t := range []uint16{dns.TypeA, dns.TypeAAAA} {
			resp, err := d.query(ctx, name, t)
			if err != nil {
				return nil, err
			}
			collect(resp.Answer)
		}
	}
	sort.Strings(v4)
	sort.Strings(v6)
	return append(v4, v6...), nil
}

// query asks the server; NXDOMAIN is an empty answer, other failures an
// error.
func (d *DNS) query(ctx context.Context, name string, t uint16) (*dns.Msg, error) {
	m := new(dns.Msg)
	m.SetQuestion(name, t)
	resp, _, err := d.client.ExchangeContext(ctx, m, d.cfg.Server)
	if err != nil {
		return nil, fmt.Errorf("%w: %s %s: %v", ErrDNS, dns.TypeToString[t], name, err)
	}
	switch resp.Rcode {
	case dns.RcodeSuccess:
		return resp, nil
	case dns.RcodeNameError:
		return &dns.Msg{}, nil
	}
	return nil, fmt.Errorf("%w: %s %s: %s", ErrDNS, dns.TypeToString[t], name, dns.RcodeToString[resp.Rcode])
}
