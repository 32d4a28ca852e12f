package epp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
)

// Router is the kvrouter.v1 Router the picker routes through, in the same
// process (*server.Server); its errors are gRPC statuses.
type Router interface {
	// Ready reports whether the router answers Route.
	Ready() bool
	Route(context.Context, *kvrouterv1.RouteRequest) (*kvrouterv1.RouteResponse, error)
	MarkPrefillDone(context.Context, *kvrouterv1.RequestRef) (*kvrouterv1.Ack, error)
	MarkFinished(context.Context, *kvrouterv1.RequestRef) (*kvrouterv1.Ack, error)
}

// Fleet is the registry of workers, for their per-rank endpoints.
type Fleet interface {
	// Worker is the registration of id, nil when it has none.
	Worker(id string) *kvrouterv1.Worker
	// Workers is every registered worker.
	Workers() []*kvrouterv1.Worker
}

// Config configures a Picker.
type Config struct {
	Router Router
	Fleet  Fleet
	// MaxBodyBytes bounds a request body the picker buffers; a longer one
	// is answered 413.
	MaxBodyBytes int
	// MaxStreams bounds the streams served at once; one more is answered
	// with BusyStatus before it is read. Memory held for bodies is at most
	// MaxStreams × MaxBodyBytes.
	MaxStreams int
	// BusyStatus is the HTTP status of a request refused because every
	// worker is busy: 503, or 429 when the gateway sheds load.
	BusyStatus int
	// ConformanceHeader honours the request header
	// test-epp-endpoint-selection (GIE's conformance runs) and copies the
	// served endpoint into x-conformance-test-served-endpoint.
	ConformanceHeader bool
	// RequestIDPrefix starts every request id the picker routes under,
	// unique to the process (replicas share load under these ids).
	RequestIDPrefix string
	Logger          *slog.Logger
	// Registerer receives the picker's metrics; nil registers none.
	Registerer prometheus.Registerer
}

// Defaults.
const (
	DefaultMaxBodyBytes = 4 << 20
	DefaultMaxStreams   = 1024
)

func (c Config) withDefaults() (Config, error) {
	if c.Router == nil || c.Fleet == nil {
		return c, errors.New("epp: Config.Router and Config.Fleet are required")
	}
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if c.MaxStreams == 0 {
		c.MaxStreams = DefaultMaxStreams
	}
	if c.BusyStatus == 0 {
		c.BusyStatus = 503
	}
	if c.MaxBodyBytes < 0 || c.MaxStreams < 0 {
		return c, fmt.Errorf("epp: MaxBodyBytes %d and MaxStreams %d must be >= 0", c.MaxBodyBytes, c.MaxStreams)
	}
	if c.BusyStatus != 503 && c.BusyStatus != 429 {
		return c, fmt.Errorf("epp: BusyStatus %d: want 503 or 429", c.BusyStatus)
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c, nil
}
