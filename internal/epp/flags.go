package epp

import (
	"flag"
	"fmt"
)

// Options is the picker's part of the router's configuration (YAML keys
// inlined at the top level of the file, and flags). The picker is off
// unless Addr is set.
type Options struct {
	Addr              string `yaml:"epp_addr"`
	MaxStreams        int    `yaml:"epp_max_streams"`
	MaxBodyBytes      int    `yaml:"epp_max_body_bytes"`
	BusyStatus        int    `yaml:"epp_busy_status"`
	ConformanceHeader bool   `yaml:"epp_conformance_header"`
}

// DefaultOptions are the picker's defaults (off).
func DefaultOptions() Options {
	return Options{MaxStreams: DefaultMaxStreams, MaxBodyBytes: DefaultMaxBodyBytes, BusyStatus: 503}
}

// RegisterFlags binds o's fields to flags of fs, o's values the defaults.
func (o *Options) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.Addr, "epp-addr", o.Addr, "listen address of the Envoy ext_proc endpoint picker (GIE InferencePool endpointPickerRef) and its gRPC health; empty: off (fd:N: an inherited socket)")
	fs.IntVar(&o.MaxStreams, "epp-max-streams", o.MaxStreams, "ext_proc streams served at once; one more is answered --epp-busy-status")
	fs.IntVar(&o.MaxBodyBytes, "epp-max-body-bytes", o.MaxBodyBytes, "largest request body the picker buffers; a longer one is answered 413")
	fs.IntVar(&o.BusyStatus, "epp-busy-status", o.BusyStatus, "HTTP status when every worker is busy: 503, or 429 to shed")
	fs.BoolVar(&o.ConformanceHeader, "epp-conformance-header", o.ConformanceHeader, "honour the test-epp-endpoint-selection request header (GIE conformance runs only)")
}

// Validate names the key of a value the picker cannot use.
func (o *Options) Validate() error {
	switch {
	case o.MaxStreams <= 0:
		return fmt.Errorf("config: epp_max_streams %d must be > 0", o.MaxStreams)
	case o.MaxBodyBytes <= 0:
		return fmt.Errorf("config: epp_max_body_bytes %d must be > 0", o.MaxBodyBytes)
	case o.BusyStatus != 503 && o.BusyStatus != 429:
		return fmt.Errorf("config: epp_busy_status %d: want 503 or 429", o.BusyStatus)
	}
	return nil
}
