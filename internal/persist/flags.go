package persist

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// Off is the state_dir that turns persistence off.
const Off = "none"

// Options is persistence's part of the router's configuration: its YAML
// keys (inlined at the top level of the file) and its flags.
type Options struct {
	StateDir         string        `yaml:"state_dir"`
	SnapshotInterval time.Duration `yaml:"snapshot_interval"`
	SnapshotCPU      float64       `yaml:"snapshot_cpu"`
}

// DefaultOptions: the state directory by the XDG rule, a snapshot every
// 30 s at DefaultSnapshotCPU.
func DefaultOptions() Options {
	return Options{StateDir: DefaultStateDir(), SnapshotInterval: 30 * time.Second, SnapshotCPU: DefaultSnapshotCPU}
}

// DefaultStateDir follows the XDG base directory rule for state data:
// $XDG_STATE_HOME/kvrouter, else ~/.local/state/kvrouter, else (no home)
// ./kvrouter-state.
func DefaultStateDir() string {
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "kvrouter")
	}
	if h, err := os.UserHomeDir(); err == nil && h != "" {
		return filepath.Join(h, ".local", "state", "kvrouter")
	}
	return "kvrouter-state"
}

// RegisterFlags binds o's fields to flags of fs, o's values the defaults.
func (o *Options) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.StateDir, "state-dir", o.StateDir, fmt.Sprintf("directory for the durable registry and index snapshots, locked while the router runs (%q: keep nothing)", Off))
	fs.DurationVar(&o.SnapshotInterval, "snapshot-interval", o.SnapshotInterval, "how often the index is snapshotted to the state dir (also at shutdown)")
	fs.Float64Var(&o.SnapshotCPU, "snapshot-cpu", o.SnapshotCPU, "share of one core a periodic snapshot may take, in (0, 1] (the shutdown snapshot runs flat out)")
}

// Validate names the key of a bad value.
func (o *Options) Validate() error {
	switch {
	case o.StateDir == "":
		return fmt.Errorf("config: state_dir is empty (%q turns persistence off)", Off)
	case o.SnapshotInterval <= 0:
		return fmt.Errorf("config: snapshot_interval %v must be positive", o.SnapshotInterval)
	case !(o.SnapshotCPU > 0 && o.SnapshotCPU <= 1):
		return fmt.Errorf("config: snapshot_cpu %v must be within (0, 1]", o.SnapshotCPU)
	}
	return nil
}

// Enabled reports whether o keeps a state directory.
func (o *Options) Enabled() bool { return o.StateDir != Off }
