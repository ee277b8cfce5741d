package validate

import (
	"time"

	"github.com/bpfbench/bpfbench/internal/manifest"
)

// ValidateRun are the settings a validation hands to its run as they are
// (RunConfig's fields of the same names): the server's own metrics and
// what the run's manifest cannot find alone, so that validate's
// result.json has the same server metrics and manifest as run's.
type ValidateRun struct {
	// ServerMetrics is the server's Prometheus endpoint ("": the
	// target's /metrics when it answers; "off": none).
	ServerMetrics string
	// ServerMetricsPeriod is the scrape period (250 ms to 1 s).
	ServerMetricsPeriod time.Duration
	// Manifest is the manifest's options (the GPUs).
	Manifest manifest.Options
}
