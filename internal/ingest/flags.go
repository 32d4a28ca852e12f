package ingest

import (
	"errors"
	"flag"
	"fmt"
	"time"
)

// Options is ingest's part of the router's configuration: its YAML keys
// (inlined at the top level of the file) and its flags. Each is 0 by
// default, which New reads as its own default (see Config).
type Options struct {
	QueueDepth       int           `yaml:"ingest_queue"`
	MaxMessageBytes  int64         `yaml:"max_message_bytes"`
	MaxBatchEvents   int           `yaml:"max_batch_events"`
	QueueBytes       int64         `yaml:"ingest_queue_bytes"`
	HandshakeTimeout time.Duration `yaml:"handshake_timeout"`
	FrameTimeout     time.Duration `yaml:"frame_timeout"`
	MaxHandshakes    int           `yaml:"max_handshakes"`
	CatchUpInterval  time.Duration `yaml:"catch_up_interval"`
}

// RegisterFlags binds o's fields to flags of fs, o's values the defaults.
func (o *Options) RegisterFlags(fs *flag.FlagSet) {
	fs.IntVar(&o.QueueDepth, "ingest-queue", o.QueueDepth, "batches queued per worker/rank before the reader waits (0: ingest's default)")
	fs.Int64Var(&o.MaxMessageBytes, "max-message-bytes", o.MaxMessageBytes, "largest ZMQ message an engine may send, all frames (0: ingest's default)")
	fs.IntVar(&o.MaxBatchEvents, "max-batch-events", o.MaxBatchEvents, "most events one batch may carry (0: normalize's default)")
	fs.Int64Var(&o.QueueBytes, "ingest-queue-bytes", o.QueueBytes, "payload bytes queued across all ranks before readers wait (0: ingest's default)")
	fs.DurationVar(&o.HandshakeTimeout, "handshake-timeout", o.HandshakeTimeout, "deadline for a ZMTP greeting and handshake (0: ingest's default)")
	fs.DurationVar(&o.FrameTimeout, "frame-timeout", o.FrameTimeout, "how long a started ZMQ message may go without progress (0: ingest's default)")
	fs.IntVar(&o.MaxHandshakes, "max-handshakes", o.MaxHandshakes, "handshakes in progress per router-bound rank (0: ingest's default)")
	fs.DurationVar(&o.CatchUpInterval, "catch-up-interval", o.CatchUpInterval, "at most one full catch-up (replay from seq 0) per rank in this long; a reconnect sooner resumes from the last applied seq (0: ingest's default, negative: no limit)")
}

// Validate refuses negative values (0 is the default).
func (o *Options) Validate() error {
	switch {
	case o.QueueDepth < 0:
		return fmt.Errorf("config: ingest_queue %d must be >= 0 (0: default)", o.QueueDepth)
	case o.MaxMessageBytes < 0 || o.MaxBatchEvents < 0 || o.QueueBytes < 0 || o.MaxHandshakes < 0:
		return errors.New("config: max_message_bytes, max_batch_events, ingest_queue_bytes and max_handshakes must be >= 0 (0: default)")
	case o.HandshakeTimeout < 0 || o.FrameTimeout < 0:
		return errors.New("config: handshake_timeout and frame_timeout must be >= 0 (0: default)")
	}
	return nil
}

// Apply sets o's fields in c.
func (o *Options) Apply(c *Config) {
	c.QueueDepth = o.QueueDepth
	c.MaxMessageBytes = o.MaxMessageBytes
	c.MaxBatchEvents = o.MaxBatchEvents
	c.QueueBytes = o.QueueBytes
	c.HandshakeTimeout = o.HandshakeTimeout
	c.FrameTimeout = o.FrameTimeout
	c.MaxHandshakes = o.MaxHandshakes
	c.CatchUpInterval = o.CatchUpInterval
}
