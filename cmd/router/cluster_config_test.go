package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/cluster"
)

// TestClusterConfig: the nats: section and replica_id of the YAML file, the
// flags over them, and the values refused with the key named.
func TestClusterConfig(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.yaml")
	yml := `nats:
  url: nats://n1:4222,nats://n2:4222
  creds_file: /etc/kvrouter/nats.creds
  tls: {ca: /etc/ca.pem, cert: /etc/c.pem, key: /etc/c-key.pem}
  prefix: prod
  connect_timeout: 2s
  replicas: 3
  share_load: false
  decide: local
  decide_timeout: 20ms
replica_id: router-1
`
	if err := os.WriteFile(path, []byte(yml), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := loadConfig([]string{"--config", path, "--replica-id", "router-2"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := cluster.NATSOptions{URL: "nats://n1:4222,nats://n2:4222", CredsFile: "/etc/kvrouter/nats.creds",
		TLS: cluster.NATSTLS{CA: "/etc/ca.pem", Cert: "/etc/c.pem", Key: "/etc/c-key.pem"}, Prefix: "prod", ConnectTimeout: 2 * time.Second, Replicas: 3, ShareLoad: false,
		Decide: cluster.DecideLocal, DecideTimeout: 20 * time.Millisecond}
	if c.Cluster.NATS != want || c.Cluster.ReplicaID != "router-2" {
		t.Fatalf("nats %+v, replica_id %q; want %+v, router-2 (the flag over the file)", c.Cluster.NATS, c.Cluster.ReplicaID, want)
	}
	if !cluster.ValidReplicaID(cluster.DefaultReplicaID()) {
		t.Fatalf("default replica id %q is not a subject token", cluster.DefaultReplicaID())
	}
	for _, tc := range []struct {
		args []string
		key  string
	}{
		{[]string{"--replica-id", "a.b"}, "replica_id"},
		{[]string{"--replica-id", ""}, "replica_id"},
		{[]string{"--nats-prefix", "kv>"}, "nats.prefix"},
		{[]string{"--nats-tls-cert", "c.pem"}, "nats.tls.cert"},
		{[]string{"--nats-connect-timeout", "0s"}, "nats.connect_timeout"},
		{[]string{"--nats-replicas", "7"}, "nats.replicas"},
		{[]string{"--nats-decide", "anyone"}, "nats.decide"},
		{[]string{"--nats-decide-timeout", "0s"}, "nats.decide_timeout"},
	} {
		_, err := loadConfig(append([]string{"--nats-url", "nats://127.0.0.1:4222"}, tc.args...), io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.key) {
			t.Errorf("%v: %v; want an error naming %s", tc.args, err, tc.key)
		}
	}
	// Without --nats-url none of it is looked at.
	if _, err := loadConfig([]string{"--replica-id", "a.b"}, io.Discard); err != nil {
		t.Fatalf("single-router mode checked replica_id: %v", err)
	}
}
