package app

import (
	"context"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/kvrouter/kvrouter/internal/discovery"
	"github.com/kvrouter/kvrouter/internal/fleet"
)

// The client-go fake clientset stands in for the API server, which cannot
// run here.

func enginePod(name, ip string, ready bool) *corev1.Pod {
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "llm", Labels: map[string]string{"app": "vllm"},
			Annotations: map[string]string{discovery.AnnotationKVEventsPort: "none"}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}},
	}
}

// fleetString is the fleet as "id=endpoint(source)", sorted.
func fleetString(f *fleet.Fleet) string {
	var s []string
	for _, r := range f.List("") {
		s = append(s, r.Worker.WorkerId+"="+r.Worker.Endpoint+"("+string(r.Source)+")")
	}
	sort.Strings(s)
	return strings.Join(s, " ")
}

// discoveryConfig turns Kubernetes discovery on over client, and returns
// the syncs as they happen.
func discoveryConfig(t *testing.T, cfg *Config, client *fake.Clientset) <-chan discovery.Result {
	syncs := make(chan discovery.Result, 256)
	cfg.Discovery.Kubernetes = KubernetesDiscovery{Enabled: true, Namespace: "llm", Selector: "app=vllm"}
	cfg.Discovery.Model = "llama"
	cfg.Discovery.Clientset = client
	cfg.Discovery.OnSync = func(r discovery.Result) {
		select {
		case syncs <- r:
		default: // the test reads the fleet, not every result
		}
	}
	return syncs
}

// waitFleet reads syncs until the fleet reads want; the deadline only
// bounds a failing test.
func waitFleet(t *testing.T, syncs <-chan discovery.Result, f *fleet.Fleet, want string) {
	t.Helper()
	deadline := time.After(time.Minute)
	for fleetString(f) != want {
		select {
		case <-syncs:
		case <-deadline:
			t.Fatalf("fleet %q; want %q", fleetString(f), want)
		}
	}
}

// A router with Kubernetes discovery registers ready pods in its fleet
// under source "discovery", unregisters them when they go not ready,
// registers them again under the same id with their new address, and
// leaves a worker of the config file with a pod's name alone.
func TestAppDiscoveryKubernetes(t *testing.T) {
	cfg, _ := testConfig(t)
	cfg.Workers = []WorkerConfig{{WorkerID: "vllm-9", Model: "llama", Endpoint: "127.0.0.9:8000"}}
	client := fake.NewClientset(enginePod("vllm-0", "127.0.0.1", true), enginePod("vllm-9", "127.0.0.2", true))
	syncs := discoveryConfig(t, &cfg, client)
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	runErr := make(chan error, 1)
	go func() { runErr <- a.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-runErr; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	<-syncs // the first sync runs after PhaseStarted: the fleet is there
	f := a.Fleet()
	waitFleet(t, syncs, f, "vllm-0=127.0.0.1:8000(discovery) vllm-9=127.0.0.9:8000(config)")

	pods := client.CoreV1().Pods("llm")
	if _, err := pods.Update(ctx, enginePod("vllm-0", "127.0.0.1", false), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFleet(t, syncs, f, "vllm-9=127.0.0.9:8000(config)")
	if _, err := pods.Update(ctx, enginePod("vllm-0", "127.0.0.3", true), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFleet(t, syncs, f, "vllm-0=127.0.0.3:8000(discovery) vllm-9=127.0.0.9:8000(config)")
	if err := pods.Delete(ctx, "vllm-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFleet(t, syncs, f, "vllm-9=127.0.0.9:8000(config)")
}

func TestDiscoveryConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(*DiscoveryConfig)
		want string
	}{
		{"off", func(*DiscoveryConfig) {}, ""},
		{"no selector", func(c *DiscoveryConfig) { c.Kubernetes.Enabled = true }, "config: discovery.kubernetes needs a selector or an inference_pool"},
		{"dns without model", func(c *DiscoveryConfig) { c.DNS.Name = "vllm" }, "config: discovery.dns needs discovery.model (DNS records name no model)"},
		{"dns server", func(c *DiscoveryConfig) { c.DNS.Name, c.Model, c.DNS.Server = "vllm", "m", "10.0.0.10" }, `config: discovery.dns.server "10.0.0.10": want host:port`},
		{"port", func(c *DiscoveryConfig) { c.Kubernetes.Enabled, c.Kubernetes.Selector, c.Port = true, "a=b", 0 }, "config: discovery.port 0: want 1..65535"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultDiscoveryConfig()
			tc.mod(&c)
			got := ""
			if err := c.Validate(); err != nil {
				got = err.Error()
			}
			if got != tc.want {
				t.Fatalf("Validate: %q; want %q", got, tc.want)
			}
		})
	}
}
