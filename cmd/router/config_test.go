package main

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Values the router would otherwise replace silently with a default (or
// ignore) are errors that name the key.
func TestConfigRejectsSilentlyDefaultedValues(t *testing.T) {
	for _, tc := range []struct {
		args []string
		key  string
	}{
		{[]string{"--prefill-weight", "0"}, "prefill_weight"},
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
	if want := (TierWeights{Device: 1, Host: 0.5, Disk: 0.25}); cfg.TierWeights != want {
		t.Fatalf("tier weights %+v; want %+v", cfg.TierWeights, want)
	}
}

// -h prints the usage and exits 0, as Go commands do.
func TestHelpExitsZero(t *testing.T) {
	out, err := exec.Command(binary, "-h").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "-grpc-addr") {
		t.Fatalf("kvrouter -h: err=%v output=%s; want usage and exit 0", err, out)
	}
}
