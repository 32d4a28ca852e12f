package radix

import (
	"flag"
	"fmt"
)

// Options is the index's part of the router's configuration: its YAML keys
// (inlined at the top level of the file) and its flags.
type Options struct {
	Shards        int `yaml:"index_shards"`
	SegmentBlocks int `yaml:"index_segment_blocks"`
}

// DefaultOptions are the index's defaults.
func DefaultOptions() Options {
	return Options{Shards: DefaultShards, SegmentBlocks: DefaultSegmentBlocks}
}

// RegisterFlags binds o's fields to flags of fs, o's values the defaults.
func (o *Options) RegisterFlags(fs *flag.FlagSet) {
	fs.IntVar(&o.Shards, "index-shards", o.Shards, fmt.Sprintf("index shards (rounded up to a power of two, at most %d)", MaxShards))
	fs.IntVar(&o.SegmentBlocks, "index-segment-blocks", o.SegmentBlocks, "index path segments start at this many blocks times each power of two; each segment is sharded by its first node")
}

// Validate refuses what New would replace with a default.
func (o *Options) Validate() error {
	switch {
	case o.Shards <= 0 || o.Shards > MaxShards:
		return fmt.Errorf("config: index_shards %d must be within 1..%d", o.Shards, MaxShards)
	case o.SegmentBlocks <= 0:
		return fmt.Errorf("config: index_segment_blocks %d must be positive", o.SegmentBlocks)
	}
	return nil
}

// Config is the index Config of o.
func (o *Options) Config() Config { return Config{Shards: o.Shards, SegmentBlocks: o.SegmentBlocks} }
