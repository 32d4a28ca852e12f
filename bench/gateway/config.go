package gateway

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"
)

// Config configures a Gateway.
type Config struct {
	// PickerAddr is the endpoint picker's ext_proc address (host:port).
	PickerAddr string
	// FailOpen sends a request the picker cannot take (unreachable, failed,
	// or too slow) to the next of Upstreams in turn; otherwise it is
	// answered 503.
	FailOpen bool
	// Upstreams are the fail-open targets (host:port).
	Upstreams []string
	// MaxBodyBytes bounds a request body the gateway holds for fail-open
	// and the echoed body it forwards (default 16 MiB); a longer request is
	// answered 413 by the gateway itself.
	MaxBodyBytes int
	// ChunkBytes is the size of the request body chunks sent to the picker
	// (default 16 KiB).
	ChunkBytes int
	// PickTimeout bounds the wait for the picker's first answer
	// (default 10 s), as Envoy's ext_proc grpc_service timeout does.
	PickTimeout time.Duration
	// Client forwards to upstreams (default: a client with no timeout,
	// since responses stream).
	Client *http.Client
	Logger *slog.Logger
}

// Defaults.
const (
	DefaultMaxBodyBytes = 16 << 20
	DefaultChunkBytes   = 16 << 10
	DefaultPickTimeout  = 10 * time.Second
)

// ErrNoUpstreams is returned for FailOpen with no Upstreams.
var ErrNoUpstreams = errors.New("gateway: FailOpen needs Upstreams")

func (c Config) withDefaults() (Config, error) {
	if c.PickerAddr == "" {
		return c, errors.New("gateway: PickerAddr is required")
	}
	if c.FailOpen && len(c.Upstreams) == 0 {
		return c, ErrNoUpstreams
	}
	if c.MaxBodyBytes < 0 || c.ChunkBytes < 0 || c.PickTimeout < 0 {
		return c, fmt.Errorf("gateway: negative limit (MaxBodyBytes %d, ChunkBytes %d, PickTimeout %v)",
			c.MaxBodyBytes, c.ChunkBytes, c.PickTimeout)
	}
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if c.ChunkBytes == 0 {
		c.ChunkBytes = DefaultChunkBytes
	}
	if c.PickTimeout == 0 {
		c.PickTimeout = DefaultPickTimeout
	}
	if c.Client == nil {
		c.Client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256, DisableCompression: true}}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c, nil
}
