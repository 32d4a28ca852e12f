package app

import (
	"context"
	"encoding/base64"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/kvrouter/kvrouter/internal/cluster/natstest"
	"github.com/kvrouter/kvrouter/internal/discovery"
	"github.com/kvrouter/kvrouter/internal/fleet"
)

// Two replicas sharing a registry over (embedded) NATS both discover the
// same pod: one registration is written, which both fleets list, and the
// pod's leaving removes it from both without either failing.
func TestAppDiscoveryReplicas(t *testing.T) {
	ns := natstest.Start(t)
	client := fake.NewClientset(enginePod("vllm-0", "127.0.0.1", true))
	ctx, cancel := context.WithCancel(context.Background())
	var runErrs []chan error
	defer func() {
		cancel()
		for _, c := range runErrs {
			if err := <-c; err != nil {
				t.Errorf("Run: %v", err)
			}
		}
	}()
	var fleets []*fleet.Fleet
	var syncs []<-chan discovery.Result
	for _, id := range []string{"r1", "r2"} {
		cfg, _ := testConfig(t)
		cfg.Cluster.NATS.URL, cfg.Cluster.ReplicaID = ns.URL(), id
		s := discoveryConfig(t, &cfg, client)
		a, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		errc := make(chan error, 1)
		runErrs = append(runErrs, errc)
		go func() { errc <- a.Run(ctx) }()
		// Each replica's first complete sync saw the pod (the informer's
		// cache synced before its first report) and registered it or
		// found it registered.
		for r := <-s; !r.Complete || len(r.Errors) > 0; r = <-s {
			if len(r.Errors) > 0 {
				t.Fatalf("replica %s: %v", id, r.Errors)
			}
		}
		fleets, syncs = append(fleets, a.Fleet()), append(syncs, s)
	}
	for i, f := range fleets {
		waitFleet(t, syncs[i], f, "vllm-0=127.0.0.1:8000(discovery)")
	}
	nc, err := nats.Connect(ns.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, "kvrouter-registry")
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(ctx, base64.RawURLEncoding.EncodeToString([]byte("vllm-0")))
	if err != nil {
		t.Fatal(err)
	}
	if e.Revision() != 1 {
		t.Fatalf("registry entry revision %d; want 1: the second replica wrote the registration again", e.Revision())
	}
	if err := client.CoreV1().Pods("llm").Delete(ctx, "vllm-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for i, f := range fleets {
		waitFleet(t, syncs[i], f, "")
	}
}
