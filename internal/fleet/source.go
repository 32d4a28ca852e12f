package fleet

// Source is where a registration came from.
type Source string

// Sources of registrations, highest precedence first.
const (
	SourceConfig    Source = "config"    // the YAML file
	SourceAPI       Source = "api"       // Registry/RegisterWorker
	SourceDiscovery Source = "discovery" // Kubernetes, InferencePool or DNS discovery
)

// rank orders sources: a source may replace or remove a registration whose
// source ranks no higher. An unknown source ranks lowest.
func (s Source) rank() int {
	switch s {
	case SourceConfig:
		return 3
	case SourceAPI:
		return 2
	case SourceDiscovery:
		return 1
	}
	return 0
}

// Outranks reports whether s takes precedence over other.
func (s Source) Outranks(other Source) bool { return s.rank() > other.rank() }

// Valid reports whether s is one of the known sources.
func (s Source) Valid() bool { return s.rank() > 0 }
