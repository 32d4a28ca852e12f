package cluster

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvrouter/kvrouter/internal/cluster/natstest"
)

// TestExistingBucketsKeepTheirSettings: a replica opens the registry
// bucket and the snapshot store an operator (or another replica) made as
// they are, rather than updating them with its own settings; without them
// it creates both.
func TestExistingBucketsKeepTheirSettings(t *testing.T) {
	ns := natstest.Start(t)
	nc, err := nats.Connect(ns.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "ops-registry", History: 10, Description: "made by ops"}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: "ops-snapshots", Description: "made by ops"}); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(ns.URL(), "a")
	cfg.Prefix = "ops"
	n, err := Connect(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	kv, err := js.KeyValue(ctx, "ops-registry")
	if err != nil {
		t.Fatal(err)
	}
	st, err := kv.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.History() != 10 {
		t.Errorf("registry history after a replica opened it: %d, want the operator's 10", st.History())
	}
	obs, err := js.ObjectStore(ctx, "ops-snapshots")
	if err != nil {
		t.Fatal(err)
	}
	ost, err := obs.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ost.Description() != "made by ops" {
		t.Errorf("snapshot store description after a replica opened it: %q, want the operator's", ost.Description())
	}

	// A prefix with nothing yet: both are created.
	cfg.Prefix, cfg.ReplicaID = "fresh", "b"
	m, err := Connect(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if _, err := js.KeyValue(ctx, "fresh-registry"); err != nil {
		t.Errorf("registry not created: %v", err)
	}
	if _, err := js.ObjectStore(ctx, "fresh-snapshots"); err != nil {
		t.Errorf("snapshot store not created: %v", err)
	}
}
