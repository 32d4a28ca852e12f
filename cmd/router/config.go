package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/kvrouter/kvrouter/internal/cluster"
	"github.com/kvrouter/kvrouter/internal/kv"
	"github.com/kvrouter/kvrouter/internal/persist"
	"github.com/kvrouter/kvrouter/internal/radix"
	"github.com/kvrouter/kvrouter/internal/scoring"
)

// Config is the router's configuration: defaults, then the --config file,
// then flags that were set on the command line.
type Config struct {
	GRPCAddr        string        `yaml:"grpc_addr"`
	HTTPAddr        string        `yaml:"http_addr"`
	BlockSize       int           `yaml:"block_size"`
	LogFormat       string        `yaml:"log_format"`
	LogLevel        string        `yaml:"log_level"`
	MaxPromptTokens int           `yaml:"max_prompt_tokens"`
	DrainTimeout    time.Duration `yaml:"drain_timeout"`
	// CatchUpWait bounds how long readiness waits, at start, for every
	// followed rank's first catch-up from its engine (0: no wait).
	CatchUpWait time.Duration `yaml:"catch_up_wait"`

	// Access control: TLS on the gRPC listener (mTLS with TLSClientCA),
	// bearer tokens per role, and the profiler on the HTTP listener.
	TLSCert            string `yaml:"tls_cert"`
	TLSKey             string `yaml:"tls_key"`
	TLSClientCA        string `yaml:"tls_client_ca"`
	RouterTokensFile   string `yaml:"router_tokens_file"`
	RegistryTokensFile string `yaml:"registry_tokens_file"`
	PProf              bool   `yaml:"pprof"`

	MaxMMItems        int `yaml:"max_mm_items"`
	MaxRequestIDBytes int `yaml:"max_request_id_bytes"`
	MaxActiveRequests int `yaml:"max_active_requests"`
	MaxWorkers        int `yaml:"max_workers"`

	Policy                 string        `yaml:"policy"`
	PrefillTokensPerSecond float64       `yaml:"prefill_tokens_per_second"`
	PrefillWeight          float64       `yaml:"prefill_weight"`
	BalanceFactor          float64       `yaml:"balance_factor"`
	TierWeights            TierWeights   `yaml:"tier_weights"`
	MaxActivePrefillTokens int64         `yaml:"max_active_prefill_tokens"`
	MaxActiveDecodeBlocks  int64         `yaml:"max_active_decode_blocks"`
	RequestTTL             time.Duration `yaml:"request_ttl"`

	Predict             bool          `yaml:"predict"`
	PredictionTTL       time.Duration `yaml:"prediction_ttl"`
	PredictionCapacity  int           `yaml:"prediction_capacity"`
	PredictionMaxBlocks int           `yaml:"prediction_max_blocks"`
	ApproxCapacity      int           `yaml:"approx_capacity"`

	IngestQueue int `yaml:"ingest_queue"`
	// The ZMQ edge's bounds; 0 takes ingest's default (see ingest.Config).
	MaxMessageBytes  int64         `yaml:"max_message_bytes"`
	MaxBatchEvents   int           `yaml:"max_batch_events"`
	IngestQueueBytes int64         `yaml:"ingest_queue_bytes"`
	HandshakeTimeout time.Duration `yaml:"handshake_timeout"`
	FrameTimeout     time.Duration `yaml:"frame_timeout"`
	MaxHandshakes    int           `yaml:"max_handshakes"`
	CatchUpInterval  time.Duration `yaml:"catch_up_interval"`

	IndexShards        int `yaml:"index_shards"`
	IndexSegmentBlocks int `yaml:"index_segment_blocks"`

	StateDir         string        `yaml:"state_dir"`
	SnapshotInterval time.Duration `yaml:"snapshot_interval"`
	SnapshotCPU      float64       `yaml:"snapshot_cpu"`

	// Cluster mode (replicas on NATS JetStream): on when NATS.URL is set.
	NATS      NATSConfig `yaml:"nats"`
	ReplicaID string     `yaml:"replica_id"`

	Workers []WorkerConfig `yaml:"workers"`
}

// NATSConfig is how a replica reaches NATS (see cluster.go).
type NATSConfig struct {
	URL            string        `yaml:"url"`
	CredsFile      string        `yaml:"creds_file"`
	TLS            NATSTLS       `yaml:"tls"`
	Prefix         string        `yaml:"prefix"`
	ConnectTimeout time.Duration `yaml:"connect_timeout"`
	// Replicas is the JetStream replica count of the bucket and object
	// store this replica creates if they are missing.
	Replicas int `yaml:"replicas"`
	// ShareLoad shares Route load, predictions and marks (off: only the
	// registry and snapshots are shared).
	ShareLoad bool `yaml:"share_load"`
}

// NATSTLS is the NATS connection's TLS: the CA to verify the server, and a
// client certificate for mTLS.
type NATSTLS struct {
	CA   string `yaml:"ca"`
	Cert string `yaml:"cert"`
	Key  string `yaml:"key"`
}

// TierWeights is the overlap credit per storage tier.
type TierWeights struct {
	Device   float64 `yaml:"device"`
	Host     float64 `yaml:"host"`
	Disk     float64 `yaml:"disk"`
	External float64 `yaml:"external"`
}

// String formats the weights as the --tier-weights flag takes them.
func (t *TierWeights) String() string {
	return fmt.Sprintf("%g,%g,%g,%g", t.Device, t.Host, t.Disk, t.External)
}

// Set parses "device,host,disk,external".
func (t *TierWeights) Set(s string) error {
	parts := strings.Split(s, ",")
	if len(parts) != 4 {
		return fmt.Errorf("want four comma-separated weights (device,host,disk,external), got %q", s)
	}
	var v [4]float64
	for i, p := range parts {
		f, err := strconv.ParseFloat(strings.TrimSpace(p), 64)
		if err != nil {
			return fmt.Errorf("weight %d: %w", i, err)
		}
		v[i] = f
	}
	*t = TierWeights{v[0], v[1], v[2], v[3]}
	return nil
}

// tierWeightsOf and array convert between the config's named weights and
// scoring's weights indexed by kv.Tier.
func tierWeightsOf(w [kv.NumTiers]float64) TierWeights {
	return TierWeights{Device: w[kv.TierDevice], Host: w[kv.TierHost], Disk: w[kv.TierDisk], External: w[kv.TierExternal]}
}

func (t *TierWeights) array() [kv.NumTiers]float64 {
	return [kv.NumTiers]float64{kv.TierDevice: t.Device, kv.TierHost: t.Host, kv.TierDisk: t.Disk, kv.TierExternal: t.External}
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
}

// defaultConfig is the configuration before the --config file and flags.
// The routing defaults are scoring's, read from scoring.DefaultConfig.
func defaultConfig() Config {
	sd := scoring.DefaultConfig()
	return Config{
		GRPCAddr:               ":50051",
		HTTPAddr:               "127.0.0.1:9090",
		BlockSize:              sd.BlockSize,
		LogFormat:              "text",
		LogLevel:               "info",
		MaxPromptTokens:        sd.MaxPromptTokens,
		DrainTimeout:           10 * time.Second,
		CatchUpWait:            10 * time.Second,
		MaxMMItems:             sd.MaxMMItems,
		MaxRequestIDBytes:      sd.MaxRequestIDBytes,
		MaxActiveRequests:      sd.MaxActiveRequests,
		MaxWorkers:             sd.MaxWorkers,
		Policy:                 string(sd.Policy),
		PrefillTokensPerSecond: sd.PrefillTokensPerSecond,
		PrefillWeight:          sd.PrefillWeight,
		BalanceFactor:          sd.BalanceFactor,
		TierWeights:            tierWeightsOf(*sd.TierWeights),
		RequestTTL:             sd.RequestTTL,
		Predict:                !sd.DisablePrediction,
		PredictionTTL:          sd.PredictionTTL,
		PredictionCapacity:     sd.PredictionCapacity,
		PredictionMaxBlocks:    sd.PredictionMaxBlocks,
		ApproxCapacity:         sd.ApproxCapacity,
		IngestQueue:            0,
		IndexShards:            radix.DefaultShards,
		IndexSegmentBlocks:     radix.DefaultSegmentBlocks,
		StateDir:               defaultStateDir(),
		SnapshotInterval:       30 * time.Second,
		SnapshotCPU:            persist.DefaultSnapshotCPU,
		NATS:                   NATSConfig{Prefix: cluster.DefaultPrefix, ConnectTimeout: 5 * time.Second, Replicas: 1, ShareLoad: true},
		ReplicaID:              defaultReplicaID(),
	}
}

// stateOff is the state_dir that turns persistence off.
const stateOff = "none"

// defaultStateDir follows the XDG base directory rule for state data:
// $XDG_STATE_HOME/kvrouter, else ~/.local/state/kvrouter, else (no home)
// ./kvrouter-state.
func defaultStateDir() string {
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "kvrouter")
	}
	if h, err := os.UserHomeDir(); err == nil && h != "" {
		return filepath.Join(h, ".local", "state", "kvrouter")
	}
	return "kvrouter-state"
}

func bindFlags(fs *flag.FlagSet, c *Config, configPath *string) {
	fs.StringVar(configPath, "config", "", "YAML config file (flags override it)")
	fs.StringVar(&c.GRPCAddr, "grpc-addr", c.GRPCAddr, "gRPC listen address")
	fs.StringVar(&c.HTTPAddr, "http-addr", c.HTTPAddr, "HTTP listen address for /metrics, /healthz (and /debug/pprof/ with --pprof); loopback by default, :9090 exposes it")
	fs.BoolVar(&c.PProf, "pprof", c.PProf, "serve /debug/pprof/ on the HTTP listener")
	fs.StringVar(&c.TLSCert, "tls-cert", c.TLSCert, "PEM certificate (chain) of the gRPC listener; with --tls-key turns TLS on")
	fs.StringVar(&c.TLSKey, "tls-key", c.TLSKey, "PEM private key of --tls-cert")
	fs.StringVar(&c.TLSClientCA, "tls-client-ca", c.TLSClientCA, "PEM CA bundle; gRPC clients must present a certificate it signed (mTLS; needs --tls-cert)")
	fs.StringVar(&c.RouterTokensFile, "router-tokens-file", c.RouterTokensFile, "file of gateway bearer tokens, one a line: they may call kvrouter.v1.Router")
	fs.StringVar(&c.RegistryTokensFile, "registry-tokens-file", c.RegistryTokensFile, "file of operator bearer tokens, one a line: they may call kvrouter.v1.Registry and Router")
	fs.IntVar(&c.BlockSize, "block-size", c.BlockSize, "router block size in tokens")
	fs.StringVar(&c.LogFormat, "log-format", c.LogFormat, "log format: text or json")
	fs.StringVar(&c.LogLevel, "log-level", c.LogLevel, "log level: debug, info, warn, error")
	fs.IntVar(&c.MaxPromptTokens, "max-prompt-tokens", c.MaxPromptTokens, "longest prompt accepted, in tokens")
	fs.DurationVar(&c.DrainTimeout, "drain-timeout", c.DrainTimeout, "how long shutdown waits for in-flight RPCs")
	fs.DurationVar(&c.CatchUpWait, "catch-up-wait", c.CatchUpWait, "how long readiness waits at start for every rank's catch-up from its engine's replay buffer (0: no wait)")
	fs.IntVar(&c.MaxMMItems, "max-mm-items", c.MaxMMItems, "most multimodal items in one prompt")
	fs.IntVar(&c.MaxRequestIDBytes, "max-request-id-bytes", c.MaxRequestIDBytes, "longest request_id accepted, in bytes")
	fs.IntVar(&c.MaxActiveRequests, "max-active-requests", c.MaxActiveRequests, "most routed requests (with a request_id) active at once; Route past it is refused")
	fs.IntVar(&c.MaxWorkers, "max-workers", c.MaxWorkers, "most registered workers")
	fs.StringVar(&c.Policy, "policy", c.Policy, "cost function: time (expected time to first token plus the prefill the choice costs later requests, learned online) or blocks (prefill-weight x prefill blocks + decode blocks)")
	fs.Float64Var(&c.PrefillTokensPerSecond, "prefill-tokens-per-second", c.PrefillTokensPerSecond, "policy time: prior prefill throughput of a rank, until MarkPrefillDone timings replace it")
	fs.Float64Var(&c.PrefillWeight, "prefill-weight", c.PrefillWeight, "policy blocks: weight of prefill blocks in the cost")
	fs.Float64Var(&c.BalanceFactor, "balance-factor", c.BalanceFactor, "bounded load: route only to workers whose recent routed context (prompt blocks routed to them, cached ones included, decayed over a window of routed requests) stays within this factor of the fleet's mean, plus the request; halfway to it for a worker holding none of the prompt (>= 1; 0: off)")
	fs.Var(&c.TierWeights, "tier-weights", "overlap credit per tier: device,host,disk,external")
	fs.Int64Var(&c.MaxActivePrefillTokens, "max-active-prefill-tokens", c.MaxActivePrefillTokens, "exclude a worker at this many active prefill tokens (0: off)")
	fs.Int64Var(&c.MaxActiveDecodeBlocks, "max-active-decode-blocks", c.MaxActiveDecodeBlocks, "exclude a worker at this many active decode blocks (0: off)")
	fs.DurationVar(&c.RequestTTL, "request-ttl", c.RequestTTL, "expire routed requests never finished after this long")
	fs.BoolVar(&c.Predict, "predict", c.Predict, "count a routed prompt's blocks as cached on the chosen worker until events confirm")
	fs.DurationVar(&c.PredictionTTL, "prediction-ttl", c.PredictionTTL, "life of a predicted block")
	fs.IntVar(&c.PredictionCapacity, "prediction-capacity", c.PredictionCapacity, "predicted blocks kept per rank of a worker with events")
	fs.IntVar(&c.PredictionMaxBlocks, "prediction-max-blocks", c.PredictionMaxBlocks, "blocks one Route predicts past the chosen worker's matched prefix")
	fs.IntVar(&c.ApproxCapacity, "approx-capacity", c.ApproxCapacity, "predicted blocks kept per rank of a worker without events")
	fs.IntVar(&c.IngestQueue, "ingest-queue", c.IngestQueue, "batches queued per worker/rank before the reader waits (0: default)")
	fs.Int64Var(&c.MaxMessageBytes, "max-message-bytes", c.MaxMessageBytes, "largest ZMQ message an engine may send, all frames (0: 16 MiB)")
	fs.IntVar(&c.MaxBatchEvents, "max-batch-events", c.MaxBatchEvents, "most events one batch may carry (0: 16384)")
	fs.Int64Var(&c.IngestQueueBytes, "ingest-queue-bytes", c.IngestQueueBytes, "payload bytes queued across all ranks before readers wait (0: 128 MiB)")
	fs.DurationVar(&c.HandshakeTimeout, "handshake-timeout", c.HandshakeTimeout, "deadline for a ZMTP greeting and handshake (0: 5s)")
	fs.DurationVar(&c.FrameTimeout, "frame-timeout", c.FrameTimeout, "how long a started ZMQ message may go without progress (0: 10s)")
	fs.IntVar(&c.MaxHandshakes, "max-handshakes", c.MaxHandshakes, "handshakes in progress per router-bound rank (0: 4)")
	fs.DurationVar(&c.CatchUpInterval, "catch-up-interval", c.CatchUpInterval, "at most one full catch-up (replay from seq 0) per rank in this long; a reconnect sooner resumes from the last applied seq (0: 30s, negative: no limit)")
	fs.IntVar(&c.IndexShards, "index-shards", c.IndexShards, "index shards (rounded up to a power of two, at most 256)")
	fs.IntVar(&c.IndexSegmentBlocks, "index-segment-blocks", c.IndexSegmentBlocks, "index path segments start at this many blocks times each power of two; each segment is sharded by its first node")
	fs.StringVar(&c.StateDir, "state-dir", c.StateDir, "directory for the durable registry and index snapshots, locked while the router runs (\"none\": keep nothing)")
	fs.DurationVar(&c.SnapshotInterval, "snapshot-interval", c.SnapshotInterval, "how often the index is snapshotted to the state dir (also at shutdown)")
	fs.StringVar(&c.NATS.URL, "nats-url", c.NATS.URL, "NATS server URL(s), comma-separated; turns cluster mode on (replicas share registry, load and snapshots)")
	fs.StringVar(&c.NATS.CredsFile, "nats-creds", c.NATS.CredsFile, "NATS credentials file (user JWT and nkey seed)")
	fs.StringVar(&c.NATS.TLS.CA, "nats-tls-ca", c.NATS.TLS.CA, "PEM CA bundle to verify the NATS server with")
	fs.StringVar(&c.NATS.TLS.Cert, "nats-tls-cert", c.NATS.TLS.Cert, "PEM client certificate for NATS (mTLS; with --nats-tls-key)")
	fs.StringVar(&c.NATS.TLS.Key, "nats-tls-key", c.NATS.TLS.Key, "PEM private key of --nats-tls-cert")
	fs.StringVar(&c.NATS.Prefix, "nats-prefix", c.NATS.Prefix, "prefix of the NATS bucket, object store and subject names")
	fs.DurationVar(&c.NATS.ConnectTimeout, "nats-connect-timeout", c.NATS.ConnectTimeout, "how long start-up waits for NATS before failing")
	fs.IntVar(&c.NATS.Replicas, "nats-replicas", c.NATS.Replicas, "JetStream replicas of the registry bucket and snapshot store when this replica creates them")
	fs.BoolVar(&c.NATS.ShareLoad, "nats-share-load", c.NATS.ShareLoad, "share Route load, predictions and marks with the other replicas (false: registry and snapshots only)")
	fs.StringVar(&c.ReplicaID, "replica-id", c.ReplicaID, "this replica's name on NATS subjects (letters, digits, - and _)")
	fs.Float64Var(&c.SnapshotCPU, "snapshot-cpu", c.SnapshotCPU, "share of one core a periodic snapshot may take, in (0, 1] (the shutdown snapshot runs flat out)")
}

// loadConfig builds the configuration from defaults, the --config file and
// the flags set in args.
func loadConfig(args []string, stderr io.Writer) (Config, error) {
	// First pass: find --config.
	var path string
	probe := flag.NewFlagSet("kvrouter", flag.ContinueOnError)
	probe.SetOutput(io.Discard)
	scratch := defaultConfig()
	bindFlags(probe, &scratch, &path)
	if err := probe.Parse(args); err != nil {
		// Report it with usage through the real flag set below.
		path = ""
	}
	cfg := defaultConfig()
	if path != "" {
		if err := readConfigFile(path, &cfg); err != nil {
			return Config{}, err
		}
	}
	fs := flag.NewFlagSet("kvrouter", flag.ContinueOnError)
	fs.SetOutput(stderr)
	bindFlags(fs, &cfg, &path)
	if err := fs.Parse(args); err != nil {
		return Config{}, err
	}
	if fs.NArg() > 0 {
		return Config{}, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	return cfg, cfg.validate()
}

func readConfigFile(path string, cfg *Config) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(cfg); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("config %s: %w", path, err)
	}
	return nil
}

func (c *Config) validate() error {
	switch {
	case c.BlockSize <= 0:
		return fmt.Errorf("config: block_size %d must be positive", c.BlockSize)
	case c.MaxPromptTokens <= 0:
		return fmt.Errorf("config: max_prompt_tokens %d must be positive", c.MaxPromptTokens)
	case c.MaxMMItems <= 0:
		return fmt.Errorf("config: max_mm_items %d must be positive", c.MaxMMItems)
	case c.MaxRequestIDBytes <= 0:
		return fmt.Errorf("config: max_request_id_bytes %d must be positive", c.MaxRequestIDBytes)
	case c.MaxActiveRequests <= 0:
		return fmt.Errorf("config: max_active_requests %d must be positive", c.MaxActiveRequests)
	case c.MaxWorkers <= 0:
		return fmt.Errorf("config: max_workers %d must be positive", c.MaxWorkers)
	case len(c.Workers) > c.MaxWorkers:
		return fmt.Errorf("config: workers lists %d workers, over max_workers %d", len(c.Workers), c.MaxWorkers)
	case (c.TLSCert == "") != (c.TLSKey == ""):
		return fmt.Errorf("config: tls_cert and tls_key go together (got tls_cert %q, tls_key %q)", c.TLSCert, c.TLSKey)
	case c.TLSClientCA != "" && c.TLSCert == "":
		return fmt.Errorf("config: tls_client_ca %q needs tls_cert and tls_key (client certificates are checked in the TLS handshake)", c.TLSClientCA)
	case c.LogFormat != "text" && c.LogFormat != "json":
		return fmt.Errorf("config: log_format %q: want text or json", c.LogFormat)
	case c.Policy != string(scoring.PolicyTime) && c.Policy != string(scoring.PolicyBlocks):
		return fmt.Errorf("config: policy %q: want %s or %s", c.Policy, scoring.PolicyTime, scoring.PolicyBlocks)
	case !(c.PrefillTokensPerSecond > 0) || math.IsInf(c.PrefillTokensPerSecond, 0):
		return fmt.Errorf("config: prefill_tokens_per_second %v must be a finite number > 0", c.PrefillTokensPerSecond)
	case !(c.PrefillWeight > 0) || math.IsInf(c.PrefillWeight, 0):
		// 0 is refused rather than passed on: scoring would read it as unset
		// and put its default in its place.
		return fmt.Errorf("config: prefill_weight %v must be a finite number > 0", c.PrefillWeight)
	case c.BalanceFactor != 0 && !(c.BalanceFactor >= 1 && !math.IsInf(c.BalanceFactor, 0)):
		return fmt.Errorf("config: balance_factor %v must be 0 (off) or a finite number >= 1", c.BalanceFactor)
	case c.RequestTTL <= 0:
		return fmt.Errorf("config: request_ttl %v must be positive", c.RequestTTL)
	case c.PredictionTTL <= 0:
		return fmt.Errorf("config: prediction_ttl %v must be positive", c.PredictionTTL)
	case c.PredictionCapacity <= 0:
		return fmt.Errorf("config: prediction_capacity %d must be positive", c.PredictionCapacity)
	case c.PredictionMaxBlocks <= 0:
		return fmt.Errorf("config: prediction_max_blocks %d must be positive", c.PredictionMaxBlocks)
	case c.ApproxCapacity <= 0:
		return fmt.Errorf("config: approx_capacity %d must be positive", c.ApproxCapacity)
	case c.MaxActivePrefillTokens < 0:
		return fmt.Errorf("config: max_active_prefill_tokens %d must be >= 0 (0: off)", c.MaxActivePrefillTokens)
	case c.MaxActiveDecodeBlocks < 0:
		return fmt.Errorf("config: max_active_decode_blocks %d must be >= 0 (0: off)", c.MaxActiveDecodeBlocks)
	case c.DrainTimeout < 0:
		return fmt.Errorf("config: drain_timeout %v must be >= 0", c.DrainTimeout)
	case c.CatchUpWait < 0:
		return fmt.Errorf("config: catch_up_wait %v must be >= 0", c.CatchUpWait)
	case c.IngestQueue < 0:
		return fmt.Errorf("config: ingest_queue %d must be >= 0 (0: default)", c.IngestQueue)
	case c.MaxMessageBytes < 0 || c.MaxBatchEvents < 0 || c.IngestQueueBytes < 0 || c.MaxHandshakes < 0:
		return fmt.Errorf("config: max_message_bytes, max_batch_events, ingest_queue_bytes and max_handshakes must be >= 0 (0: default)")
	case c.HandshakeTimeout < 0 || c.FrameTimeout < 0:
		return fmt.Errorf("config: handshake_timeout and frame_timeout must be >= 0 (0: default)")
	case c.IndexShards <= 0 || c.IndexShards > radix.MaxShards:
		return fmt.Errorf("config: index_shards %d must be within 1..%d", c.IndexShards, radix.MaxShards)
	case c.IndexSegmentBlocks <= 0:
		return fmt.Errorf("config: index_segment_blocks %d must be positive", c.IndexSegmentBlocks)
	case c.StateDir == "":
		return fmt.Errorf("config: state_dir is empty (%q turns persistence off)", stateOff)
	case c.SnapshotInterval <= 0:
		return fmt.Errorf("config: snapshot_interval %v must be positive", c.SnapshotInterval)
	case !(c.SnapshotCPU > 0 && c.SnapshotCPU <= 1):
		return fmt.Errorf("config: snapshot_cpu %v must be within (0, 1]", c.SnapshotCPU)
	}
	if err := c.validateCluster(); err != nil {
		return err
	}
	for _, w := range []struct {
		name string
		v    float64
	}{{"device", c.TierWeights.Device}, {"host", c.TierWeights.Host}, {"disk", c.TierWeights.Disk}, {"external", c.TierWeights.External}} {
		if !(w.v >= 0 && w.v <= 1) {
			return fmt.Errorf("config: tier_weights.%s %v must be within 0..1", w.name, w.v)
		}
	}
	return nil
}

// scoringConfig is the part of c that configures the scoring Router.
func (c *Config) scoringConfig(index *radix.Index) scoring.Config {
	weights := c.TierWeights.array()
	return scoring.Config{
		Index:                  index,
		BlockSize:              c.BlockSize,
		MaxPromptTokens:        c.MaxPromptTokens,
		Policy:                 scoring.Policy(c.Policy),
		PrefillTokensPerSecond: c.PrefillTokensPerSecond,
		PrefillWeight:          c.PrefillWeight,
		BalanceFactor:          c.BalanceFactor,
		DisableBalance:         c.BalanceFactor == 0,
		TierWeights:            &weights,
		MaxActivePrefillTokens: c.MaxActivePrefillTokens,
		MaxActiveDecodeBlocks:  c.MaxActiveDecodeBlocks,
		RequestTTL:             c.RequestTTL,
		DisablePrediction:      !c.Predict,
		PredictionTTL:          c.PredictionTTL,
		PredictionCapacity:     c.PredictionCapacity,
		PredictionMaxBlocks:    c.PredictionMaxBlocks,
		ApproxCapacity:         c.ApproxCapacity,
		MaxMMItems:             c.MaxMMItems,
		MaxRequestIDBytes:      c.MaxRequestIDBytes,
		MaxActiveRequests:      c.MaxActiveRequests,
		MaxWorkers:             c.MaxWorkers,
	}
}
