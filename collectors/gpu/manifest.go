package gpu

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/bpfbench/bpfbench/internal/manifest"
)

// ManifestSource answers the GPU part of a run's manifest from this host's
// NVML: nil without error on a host without NVML (no GPU part, no note).
var ManifestSource = ManifestOf(nil)

// ManifestOf answers the GPU part of a run's manifest from lib (nil:
// nvml.New(); tests pass a mock).
func ManifestOf(lib nvml.Interface) manifest.GPUSource {
	return manifest.GPUSourceFunc(func() (*manifest.GPU, error) { return manifestGPU(lib) })
}

func manifestGPU(lib nvml.Interface) (*manifest.GPU, error) {
	if lib == nil {
		lib = nvml.New()
	}
	switch ret := lib.Init(); ret {
	case nvml.SUCCESS:
	case nvml.ERROR_LIBRARY_NOT_FOUND:
		return nil, nil
	default:
		return nil, fmt.Errorf("initializing NVML: %s", nvml.ErrorString(ret))
	}
	defer lib.Shutdown()
	g := &manifest.GPU{}
	if v, ret := lib.SystemGetDriverVersion(); ret == nvml.SUCCESS {
		g.DriverVersion = v
	}
	if v, ret := lib.SystemGetNVMLVersion(); ret == nvml.SUCCESS {
		g.NVMLVersion = v
	}
	if v, ret := lib.SystemGetCudaDriverVersion(); ret == nvml.SUCCESS {
		g.CUDADriverVersion = v
	}
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return g, fmt.Errorf("counting GPUs with NVML: %s", nvml.ErrorString(ret))
	}
	for i := 0; i < n; i++ {
		d := manifest.GPUDevice{Index: i}
		if h, ret := lib.DeviceGetHandleByIndex(i); ret == nvml.SUCCESS {
			d.UUID, _ = h.GetUUID()
			d.Name, _ = h.GetName()
		}
		g.Devices = append(g.Devices, d)
	}
	return g, nil
}
