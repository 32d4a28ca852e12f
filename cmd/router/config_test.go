package main

import (
	"flag"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/kvrouter/kvrouter/internal/app"
	"github.com/kvrouter/kvrouter/internal/cluster"
	"github.com/kvrouter/kvrouter/internal/radix"
	"github.com/kvrouter/kvrouter/internal/scoring"
)

// Values the router would otherwise replace silently with a default (or
// ignore) are errors that name the key.
func TestConfigRejectsSilentlyDefaultedValues(t *testing.T) {
	for _, tc := range []struct {
		args []string
		key  string
	}{
		{[]string{"--prefill-weight", "0"}, "prefill_weight"},
		{[]string{"--policy", "fastest"}, "policy"},
		{[]string{"--balance-factor", "0.5"}, "balance_factor"},
		{[]string{"--balance-factor", "-1"}, "balance_factor"},
		{[]string{"--prefill-tokens-per-second", "0"}, "prefill_tokens_per_second"},
		{[]string{"--request-ttl", "-1s"}, "request_ttl"},
		{[]string{"--request-ttl", "0s"}, "request_ttl"},
		{[]string{"--prediction-ttl", "0s"}, "prediction_ttl"},
		{[]string{"--prediction-capacity", "0"}, "prediction_capacity"},
		{[]string{"--approx-capacity", "-5"}, "approx_capacity"},
		{[]string{"--max-active-prefill-tokens", "-1"}, "max_active_prefill_tokens"},
		{[]string{"--max-active-decode-blocks", "-1"}, "max_active_decode_blocks"},
		{[]string{"--tier-weights", "1,1.5,0.25,0"}, "tier_weights"},
		{[]string{"--drain-timeout", "-1s"}, "drain_timeout"},
		{[]string{"--ingest-queue", "-1"}, "ingest_queue"},
		{[]string{"--index-shards", "0"}, "index_shards"},
		{[]string{"--index-shards", "1024"}, "index_shards"},
		{[]string{"--index-segment-blocks", "0"}, "index_segment_blocks"},
		{[]string{"--max-mm-items", "0"}, "max_mm_items"},
		{[]string{"--max-request-id-bytes", "-1"}, "max_request_id_bytes"},
		{[]string{"--max-active-requests", "0"}, "max_active_requests"},
		{[]string{"--max-workers", "0"}, "max_workers"},
	} {
		_, err := loadConfig(tc.args, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.key) {
			t.Errorf("%v: err = %v; want an error naming %s", tc.args, err, tc.key)
		}
	}
}

// A tier_weights map that names some tiers keeps the defaults of the others.
func TestConfigPartialTierWeights(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(path, []byte("tier_weights: {host: 0.5}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := loadConfig([]string{"--config", path}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if want := (scoring.TierWeights{Device: 1, Host: 0.5, Disk: 0.25}); cfg.Scoring.TierWeights != want {
		t.Fatalf("tier weights %+v; want %+v", cfg.Scoring.TierWeights, want)
	}
}

// -h prints the usage and exits 0, as Go commands do.
func TestHelpExitsZero(t *testing.T) {
	out, err := exec.Command(binary, "-h").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "-grpc-addr") {
		t.Fatalf("kvrouter -h: err=%v output=%s; want usage and exit 0", err, out)
	}
}

// The flags and their defaults are what users' command lines and config
// files were written against. (The index-* defaults are radix's.)
func TestFlagDefaults(t *testing.T) {
	want := map[string]string{
		"approx-capacity":           "16384",
		"balance-factor":            "1.3",
		"block-size":                "16",
		"config":                    "",
		"drain-timeout":             "10s",
		"epp-addr":                  "",
		"epp-busy-status":           "503",
		"epp-conformance-header":    "false",
		"epp-max-body-bytes":        "4194304",
		"epp-max-streams":           "1024",
		"discover-kubernetes":       "false",
		"discover-namespace":        "",
		"discover-selector":         "",
		"discover-inference-pool":   "",
		"discover-dns":              "",
		"discover-model":            "",
		"grpc-addr":                 ":50051",
		"http-addr":                 "127.0.0.1:9090",
		"index-segment-blocks":      strconv.Itoa(radix.DefaultSegmentBlocks),
		"index-shards":              strconv.Itoa(radix.DefaultShards),
		"ingest-queue":              "0",
		"max-message-bytes":         "0",
		"max-batch-events":          "0",
		"ingest-queue-bytes":        "0",
		"handshake-timeout":         "0s",
		"frame-timeout":             "0s",
		"max-handshakes":            "0",
		"catch-up-interval":         "0s",
		"catch-up-wait":             "10s",
		"log-format":                "text",
		"log-level":                 "info",
		"max-active-decode-blocks":  "0",
		"max-active-prefill-tokens": "0",
		"max-prompt-tokens":         "262144",
		"max-mm-items":              "1024",
		"max-request-id-bytes":      "256",
		"max-active-requests":       "100000",
		"max-workers":               "10000",
		"model":                     "",
		"nats-url":                  "",
		"nats-creds":                "",
		"nats-tls-ca":               "",
		"nats-tls-cert":             "",
		"nats-tls-key":              "",
		"nats-prefix":               "kvrouter",
		"nats-connect-timeout":      "5s",
		"nats-replicas":             "1",
		"nats-share-load":           "true",
		"nats-decide":               "leader",
		"nats-decide-timeout":       "50ms",
		"replica-id":                cluster.DefaultReplicaID(),
		"pprof":                     "false",
		"predict":                   "true",
		"prediction-capacity":       "8192",
		"prediction-max-blocks":     "64",
		"prediction-ttl":            "2m0s",
		"policy":                    "time",
		"prefill-tokens-per-second": "10000",
		"prefill-weight":            "2",
		"rank-rates":                "false",
		"registry-tokens-file":      "",
		"request-ttl":               "5m0s",
		"router-tokens-file":        "",
		"snapshot-cpu":              "0.25",
		"snapshot-interval":         "30s",
		"state-dir":                 "/xdg/state/kvrouter",
		"tier-weights":              "1,0.75,0.25,0",
		"tls-cert":                  "",
		"tls-client-ca":             "",
		"tls-key":                   "",
		"version":                   "false",
	}
	t.Setenv("XDG_STATE_HOME", "/xdg/state")
	var path string
	var version bool
	c := app.DefaultConfig()
	fs := newFlagSet(&c, &path, &version)
	got := map[string]string{}
	fs.VisitAll(func(f *flag.Flag) { got[f.Name] = f.DefValue })
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("flag defaults %v; want %v", got, want)
	}
}

// The limits are read from the YAML file under their keys, flags override
// them, and they reach scoring; a file listing more workers than max_workers
// is an error naming it.
func TestConfigLimits(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.yaml")
	yml := "max_mm_items: 8\nmax_request_id_bytes: 64\nmax_active_requests: 500\nmax_workers: 20\n"
	if err := os.WriteFile(path, []byte(yml), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := loadConfig([]string{"--config", path, "--max-workers", "30"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	sc := cfg.Scoring.Config(radix.New(radix.Config{}))
	if sc.MaxMMItems != 8 || sc.MaxRequestIDBytes != 64 || sc.MaxActiveRequests != 500 || sc.MaxWorkers != 30 {
		t.Fatalf("scoring limits %d %d %d %d; want 8 64 500 30", sc.MaxMMItems, sc.MaxRequestIDBytes, sc.MaxActiveRequests, sc.MaxWorkers)
	}
	yml = "max_workers: 1\nworkers:\n  - {worker_id: a, model: m}\n  - {worker_id: b, model: m}\n"
	if err := os.WriteFile(path, []byte(yml), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := loadConfig([]string{"--config", path}, io.Discard); err == nil || !strings.Contains(err.Error(), "max_workers") {
		t.Fatalf("two workers over max_workers 1: %v; want an error naming max_workers", err)
	}
}

// --version prints the build (the module's version and VCS revision when
// built plainly, the -X version when set) and exits 0.
func TestVersion(t *testing.T) {
	out, err := exec.Command(binary, "--version").Output()
	if err != nil || !strings.HasPrefix(string(out), "kvrouter ") || !strings.Contains(string(out), " go1.") {
		t.Fatalf("kvrouter --version: %v %q; want kvrouter <version> ... go1.x", err, out)
	}
	tagged := filepath.Join(t.TempDir(), "kvrouter")
	build := exec.Command("go", "build", "-o", tagged, "-ldflags", "-X github.com/kvrouter/kvrouter/internal/app.version=v9.8.7", ".")
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build with -X: %v\n%s", err, b)
	}
	out, err = exec.Command(tagged, "--version", "--config", "/no/such/file").Output()
	if err != nil || !strings.HasPrefix(string(out), "kvrouter v9.8.7") {
		t.Fatalf("-X build --version: %v %q; want kvrouter v9.8.7 (and the config file not read)", err, out)
	}
}
