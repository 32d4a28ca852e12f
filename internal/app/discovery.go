package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/miekg/dns"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
	"github.com/kvrouter/kvrouter/internal/discovery"
)

// DiscoveryConfig is the discovery: section: engines found in Kubernetes or
// DNS are registered with source "discovery" (the config file's and the
// API's workers outrank them). The engine defaults apply to every source
// where a pod's annotations do not say otherwise.
type DiscoveryConfig struct {
	discovery.Defaults `yaml:",inline"`
	Kubernetes         KubernetesDiscovery `yaml:"kubernetes"`
	DNS                DNSDiscovery        `yaml:"dns"`
	// RetryInterval is how soon a registration the fleet refused is
	// tried again.
	RetryInterval time.Duration `yaml:"retry_interval"`

	// Not configuration: a test hands over the Kubernetes clients (nil:
	// the in-cluster ones) and watches each sync.
	Clientset kubernetes.Interface   `yaml:"-"`
	Dynamic   dynamic.Interface      `yaml:"-"`
	OnSync    func(discovery.Result) `yaml:"-"`
}

// KubernetesDiscovery selects engine pods by label or by an InferencePool.
type KubernetesDiscovery struct {
	Enabled bool `yaml:"enabled"`
	// Namespace of the pods; empty: the router's own.
	Namespace string `yaml:"namespace"`
	Selector  string `yaml:"selector"`
	// InferencePool names a GIE InferencePool (v1) in Namespace whose
	// selector and target ports are used instead of Selector and port.
	InferencePool string        `yaml:"inference_pool"`
	Resync        time.Duration `yaml:"resync"`
}

// DNSDiscovery resolves a name on an interval.
type DNSDiscovery struct {
	// Name is the headless service's name; empty: off.
	Name string `yaml:"name"`
	// SRV resolves Name's SRV records (target and port per worker)
	// instead of its A/AAAA records.
	SRV bool `yaml:"srv"`
	// Server is host:port; empty: the first nameserver of
	// /etc/resolv.conf.
	Server   string        `yaml:"server"`
	Interval time.Duration `yaml:"interval"`
}

// DefaultDiscoveryConfig is discovery off, with vLLM's ports.
func DefaultDiscoveryConfig() DiscoveryConfig {
	return DiscoveryConfig{Defaults: discovery.DefaultDefaults(), RetryInterval: 10 * time.Second,
		DNS: DNSDiscovery{Interval: 10 * time.Second}}
}

// Enabled reports whether a source is on.
func (c *DiscoveryConfig) Enabled() bool { return c.Kubernetes.Enabled || c.DNS.Name != "" }

// RegisterFlags binds the common settings to flags.
func (c *DiscoveryConfig) RegisterFlags(fs *flag.FlagSet) {
	fs.BoolVar(&c.Kubernetes.Enabled, "discover-kubernetes", c.Kubernetes.Enabled, "register the engine pods --discover-selector (or --discover-inference-pool) selects, as they become ready")
	fs.StringVar(&c.Kubernetes.Namespace, "discover-namespace", c.Kubernetes.Namespace, "the engine pods' namespace (empty: the router's own)")
	fs.StringVar(&c.Kubernetes.Selector, "discover-selector", c.Kubernetes.Selector, "label selector of the engine pods, e.g. app=vllm")
	fs.StringVar(&c.Kubernetes.InferencePool, "discover-inference-pool", c.Kubernetes.InferencePool, "an InferencePool (v1) whose selector and target ports give the engines")
	fs.StringVar(&c.DNS.Name, "discover-dns", c.DNS.Name, "a DNS name resolved every discovery.dns.interval into engines (empty: off)")
	fs.StringVar(&c.Model, "discover-model", c.Model, "the model of a discovered engine that does not name one (annotation kvrouter.io/model)")
}

// Validate names the key at fault.
func (c *DiscoveryConfig) Validate() error {
	if !c.Enabled() {
		return nil
	}
	if err := c.Defaults.Validate(); err != nil {
		return fmt.Errorf("config: discovery.%w", err)
	}
	k := c.Kubernetes
	switch {
	case c.RetryInterval <= 0:
		return fmt.Errorf("config: discovery.retry_interval %v must be > 0", c.RetryInterval)
	case k.Enabled && k.Selector == "" && k.InferencePool == "":
		return errors.New("config: discovery.kubernetes needs a selector or an inference_pool")
	case k.Resync < 0:
		return fmt.Errorf("config: discovery.kubernetes.resync %v must be >= 0", k.Resync)
	case c.DNS.Name != "" && c.DNS.Interval <= 0:
		return fmt.Errorf("config: discovery.dns.interval %v must be > 0", c.DNS.Interval)
	case c.DNS.Name != "" && c.Model == "":
		return errors.New("config: discovery.dns needs discovery.model (DNS records name no model)")
	}
	if s := c.DNS.Server; s != "" {
		if _, _, err := net.SplitHostPort(s); err != nil {
			return fmt.Errorf("config: discovery.dns.server %q: want host:port", s)
		}
	}
	return nil
}

// discoveryModule runs the configured sources from PhaseStarted, feeding
// the fleet.
func discoveryModule(a *App) error {
	c := &a.cfg.Discovery
	if !c.Enabled() {
		return nil
	}
	a.OnPhase(PhaseStarted, func(context.Context) error {
		m, err := discovery.NewMetrics(a.reg)
		if err != nil {
			return fmt.Errorf("discovery: %w", err)
		}
		sources, err := c.sources(a, m)
		if err != nil {
			return fmt.Errorf("discovery: %w", err)
		}
		var names []string
		for _, s := range sources {
			names = append(names, s.Name())
		}
		syncer, err := discovery.NewSyncer(discovery.SyncConfig{Registry: a.Fleet(), Sources: names,
			RetryInterval: c.RetryInterval, Logger: a.log, OnSync: c.OnSync, Metrics: m})
		if err != nil {
			return err
		}
		a.Go(syncer.Run)
		for _, s := range sources {
			a.Go(func(ctx context.Context) {
				report := func(ws []*kvrouterv1.Worker) { syncer.Report(s.Name(), ws) }
				if err := s.Run(ctx, report); err != nil {
					a.log.Error("discovery stopped", "source", s.Name(), "err", err)
				}
			})
		}
		a.log.Info("discovery on", "sources", strings.Join(names, ","))
		return nil
	})
	return nil
}

func (c *DiscoveryConfig) sources(a *App, m *discovery.Metrics) ([]discovery.Source, error) {
	var out []discovery.Source
	if k := c.Kubernetes; k.Enabled {
		kc := discovery.KubeConfig{Client: c.Clientset, Dynamic: c.Dynamic, Namespace: k.Namespace, Selector: k.Selector,
			Pool: k.InferencePool, Defaults: c.Defaults, Resync: k.Resync, Logger: a.log, Metrics: m}
		if err := inCluster(&kc); err != nil {
			return nil, err
		}
		src, err := discovery.NewKube(kc)
		if err != nil {
			return nil, err
		}
		out = append(out, src)
	}
	if d := c.DNS; d.Name != "" {
		server := d.Server
		if server == "" {
			rc, err := dns.ClientConfigFromFile("/etc/resolv.conf")
			if err != nil || len(rc.Servers) == 0 {
				return nil, fmt.Errorf("discovery.dns.server is empty and /etc/resolv.conf names no nameserver (%v)", err)
			}
			server = net.JoinHostPort(rc.Servers[0], rc.Port)
		}
		src, err := discovery.NewDNS(discovery.DNSConfig{Name: d.Name, SRV: d.SRV, Server: server, Interval: d.Interval,
			Defaults: c.Defaults, Logger: a.log, Metrics: m})
		if err != nil {
			return nil, err
		}
		out = append(out, src)
	}
	return out, nil
}

// serviceAccountNamespace is where a pod reads its own namespace.
const serviceAccountNamespace = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// inCluster fills the clients a test did not hand over from the pod's
// service account, and the namespace from the pod's own.
func inCluster(kc *discovery.KubeConfig) error {
	if kc.Namespace == "" {
		b, err := os.ReadFile(serviceAccountNamespace)
		if err != nil {
			return fmt.Errorf("discovery.kubernetes.namespace is empty and the pod's own is unknown: %w", err)
		}
		kc.Namespace = strings.TrimSpace(string(b))
	}
	if kc.Client != nil && (kc.Pool == "" || kc.Dynamic != nil) {
		return nil
	}
	rc, err := rest.InClusterConfig()
	if err != nil {
		return fmt.Errorf("kubernetes discovery outside a cluster: %w", err)
	}
	if kc.Client == nil {
		if kc.Client, err = kubernetes.NewForConfig(rc); err != nil {
			return err
		}
	}
	if kc.Pool != "" && kc.Dynamic == nil {
		if kc.Dynamic, err = dynamic.NewForConfig(rc); err != nil {
			return err
		}
	}
	return nil
}
