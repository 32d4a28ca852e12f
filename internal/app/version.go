package app

import (
	"runtime"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
)

// version is the release, set when building:
//
//	go build -ldflags "-X github.com/kvrouter/kvrouter/internal/app.version=v1.2.3" ./cmd/router
//
// Unset, BuildVersion reads the module version and VCS revision the Go
// toolchain embedded.
var version string

// Build describes the running binary.
type Build struct {
	Version   string // the -X version, else the main module's version ("(devel)" in a work tree)
	Revision  string // VCS revision, with "-dirty" when modified; "" unknown
	GoVersion string
}

// BuildVersion describes the running binary.
func BuildVersion() Build {
	b := Build{Version: version, GoVersion: runtime.Version()}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		if b.Version == "" {
			b.Version = "unknown"
		}
		return b
	}
	if b.Version == "" {
		b.Version = info.Main.Version
	}
	if b.Version == "" {
		b.Version = "(devel)"
	}
	dirty := false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			b.Revision = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if dirty && b.Revision != "" {
		b.Revision += "-dirty"
	}
	return b
}

// String is the --version line.
func (b Build) String() string {
	s := "kvrouter " + b.Version
	if b.Revision != "" {
		s += " (" + b.Revision + ")"
	}
	return s + " " + b.GoVersion
}

// buildInfoCollector is kvrouter_build_info: 1, labelled with the build.
func buildInfoCollector(b Build) prometheus.Collector {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "kvrouter_build_info",
		Help:        "The running kvrouter's build: version, VCS revision and Go version in labels; always 1.",
		ConstLabels: prometheus.Labels{"version": b.Version, "revision": b.Revision, "goversion": b.GoVersion},
	})
	g.Set(1)
	return g
}
