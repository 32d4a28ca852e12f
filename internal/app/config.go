package app

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"time"

	"go.yaml.in/yaml/v3"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
	"github.com/kvrouter/kvrouter/internal/cluster"
	"github.com/kvrouter/kvrouter/internal/epp"
	"github.com/kvrouter/kvrouter/internal/ingest"
	"github.com/kvrouter/kvrouter/internal/persist"
	"github.com/kvrouter/kvrouter/internal/radix"
	"github.com/kvrouter/kvrouter/internal/scoring"
	"github.com/kvrouter/kvrouter/internal/server"
)

// Config is the router's configuration: defaults (DefaultConfig), then the
// YAML file (ReadFile), then flags set on the command line
// (RegisterFlags). Each package owns its part, its defaults, validation
// and flags; their YAML keys are inlined at the top level of the file.
type Config struct {
	GRPCAddr     string        `yaml:"grpc_addr"`
	HTTPAddr     string        `yaml:"http_addr"`
	LogFormat    string        `yaml:"log_format"`
	LogLevel     string        `yaml:"log_level"`
	DrainTimeout time.Duration `yaml:"drain_timeout"`
	// CatchUpWait bounds how long readiness waits, at start, for every
	// followed rank's first catch-up from its engine (0: no wait).
	CatchUpWait time.Duration `yaml:"catch_up_wait"`
	// PProf serves /debug/pprof/ on the HTTP listener.
	PProf bool `yaml:"pprof"`

	Access  server.AccessOptions `yaml:",inline"`
	Scoring scoring.Options      `yaml:",inline"`
	Ingest  ingest.Options       `yaml:",inline"`
	Index   radix.Options        `yaml:",inline"`
	Persist persist.Options      `yaml:",inline"`
	Cluster cluster.Options      `yaml:",inline"`
	EPP     epp.Options          `yaml:",inline"`

	// Discovery registers engines found in Kubernetes or DNS.
	Discovery DiscoveryConfig `yaml:"discovery"`

	// Workers are registered at start (source "config").
	Workers []WorkerConfig `yaml:"workers"`
	// Models are tokenized locally for text and OpenAI-body prompts (tokenizer.go).
	Models ModelConfigs `yaml:"models"`

	// Not configuration: what a caller that is not the binary hands over.

	// GRPCListener and HTTPListener, when set, are served instead of
	// listening on GRPCAddr and HTTPAddr: a test binds :0 itself.
	GRPCListener net.Listener `yaml:"-"`
	HTTPListener net.Listener `yaml:"-"`
	// LogOutput receives the log (nil: os.Stderr).
	LogOutput io.Writer `yaml:"-"`
	// Modules are wired in after the built-in ones (see Module).
	Modules []Module `yaml:"-"`
}

// WorkerConfig is a static worker registered at start.
type WorkerConfig struct {
	WorkerID         string `yaml:"worker_id"`
	Model            string `yaml:"model"`
	Endpoint         string `yaml:"endpoint"`
	KVEventsEndpoint string `yaml:"kv_events_endpoint"`
	ReplayEndpoint   string `yaml:"replay_endpoint"`
	DPSize           uint32 `yaml:"dp_size"`
	BlockSize        uint32 `yaml:"block_size"`
	Topic            string `yaml:"topic"`
	// CapacityTokens is one rank's KV cache size in tokens (0: learned).
	CapacityTokens uint64 `yaml:"capacity_tokens"`
	// RankKVEventsEndpoints and RankReplayEndpoints list each rank's
	// endpoints (dp_size entries) instead of the rank 0 endpoint's port + rank.
	RankKVEventsEndpoints []string `yaml:"rank_kv_events_endpoints"`
	RankReplayEndpoints   []string `yaml:"rank_replay_endpoints"`
}

// Proto is w as the Registry API carries it.
func (w WorkerConfig) Proto() *kvrouterv1.Worker {
	return &kvrouterv1.Worker{
		WorkerId: w.WorkerID, Model: w.Model, Endpoint: w.Endpoint,
		KvEventsEndpoint: w.KVEventsEndpoint, ReplayEndpoint: w.ReplayEndpoint,
		DpSize: w.DPSize, BlockSize: w.BlockSize, Topic: w.Topic,
		CapacityTokens: w.CapacityTokens, RankKvEventsEndpoints: w.RankKVEventsEndpoints,
		RankReplayEndpoints: w.RankReplayEndpoints,
	}
}

// DefaultConfig is the configuration before the file and flags: each
// package's defaults.
func DefaultConfig() Config {
	return Config{
		GRPCAddr:     ":50051",
		HTTPAddr:     "127.0.0.1:9090",
		LogFormat:    "text",
		LogLevel:     "info",
		DrainTimeout: 10 * time.Second,
		CatchUpWait:  10 * time.Second,
		Scoring:      scoring.DefaultOptions(),
		Index:        radix.DefaultOptions(),
		Persist:      persist.DefaultOptions(),
		Cluster:      cluster.DefaultOptions(),
		EPP:          epp.DefaultOptions(),
		Discovery:    DefaultDiscoveryConfig(),
	}
}

// RegisterFlags binds c's fields to flags of fs, c's values the defaults:
// the router's own, then each package's.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.GRPCAddr, "grpc-addr", c.GRPCAddr, "gRPC listen address (fd:N: the listening socket inherited as descriptor N)")
	fs.StringVar(&c.HTTPAddr, "http-addr", c.HTTPAddr, "HTTP listen address for /metrics, /healthz (and /debug/pprof/ with --pprof); loopback by default, :9090 exposes it (fd:N: an inherited socket)")
	fs.BoolVar(&c.PProf, "pprof", c.PProf, "serve /debug/pprof/ on the HTTP listener")
	fs.StringVar(&c.LogFormat, "log-format", c.LogFormat, "log format: text or json")
	fs.StringVar(&c.LogLevel, "log-level", c.LogLevel, "log level: debug, info, warn, error")
	fs.DurationVar(&c.DrainTimeout, "drain-timeout", c.DrainTimeout, "how long shutdown waits for in-flight RPCs")
	fs.DurationVar(&c.CatchUpWait, "catch-up-wait", c.CatchUpWait, "how long readiness waits at start for every rank's catch-up from its engine's replay buffer (0: no wait)")
	c.Access.RegisterFlags(fs)
	c.Scoring.RegisterFlags(fs)
	c.Ingest.RegisterFlags(fs)
	c.Index.RegisterFlags(fs)
	c.Persist.RegisterFlags(fs)
	c.Cluster.RegisterFlags(fs)
	c.EPP.RegisterFlags(fs)
	c.Models.RegisterFlags(fs)
	c.Discovery.RegisterFlags(fs)
}

// ReadFile reads the YAML file at path over c; an unknown key is an error.
func (c *Config) ReadFile(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(c); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("config %s: %w", path, err)
	}
	return nil
}

// Validate refuses, naming the key, every value that would be replaced
// silently with a default or refused later.
func (c *Config) Validate() error {
	switch {
	case c.LogFormat != "text" && c.LogFormat != "json":
		return fmt.Errorf("config: log_format %q: want text or json", c.LogFormat)
	case c.DrainTimeout < 0:
		return fmt.Errorf("config: drain_timeout %v must be >= 0", c.DrainTimeout)
	case c.CatchUpWait < 0:
		return fmt.Errorf("config: catch_up_wait %v must be >= 0", c.CatchUpWait)
	}
	for _, v := range []interface{ Validate() error }{&c.Access, &c.Scoring, &c.Ingest, &c.Index, &c.Persist, &c.Cluster, &c.EPP, &c.Discovery} {
		if err := v.Validate(); err != nil {
			return err
		}
	}
	if err := c.Models.Validate(); err != nil {
		return err
	}
	if len(c.Workers) > c.Scoring.MaxWorkers {
		return fmt.Errorf("config: workers lists %d workers, over max_workers %d", len(c.Workers), c.Scoring.MaxWorkers)
	}
	return nil
}
