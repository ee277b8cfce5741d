package gpu

import (
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
)

// The manifest's GPU part is what NVML reports: versions and each device's
// UUID and name; a host without NVML has none and no error.
func TestManifestGPU(t *testing.T) {
	dev := func(uuid, name string) nvml.Device {
		return &mock.Device{
			GetUUIDFunc: func() (string, nvml.Return) { return uuid, nvml.SUCCESS },
			GetNameFunc: func() (string, nvml.Return) { return name, nvml.SUCCESS },
		}
	}
	devs := []nvml.Device{dev("GPU-aaaa", "NVIDIA H200"), dev("GPU-bbbb", "NVIDIA H200")}
	shut := 0
	lib := &mock.Interface{
		InitFunc:                       func() nvml.Return { return nvml.SUCCESS },
		ShutdownFunc:                   func() nvml.Return { shut++; return nvml.SUCCESS },
		SystemGetDriverVersionFunc:     func() (string, nvml.Return) { return "570.86.15", nvml.SUCCESS },
		SystemGetNVMLVersionFunc:       func() (string, nvml.Return) { return "12.570.86.15", nvml.SUCCESS },
		SystemGetCudaDriverVersionFunc: func() (int, nvml.Return) { return 12080, nvml.SUCCESS },
		DeviceGetCountFunc:             func() (int, nvml.Return) { return len(devs), nvml.SUCCESS },
		DeviceGetHandleByIndexFunc:     func(i int) (nvml.Device, nvml.Return) { return devs[i], nvml.SUCCESS },
	}
	g, err := ManifestOf(lib).ManifestGPU()
	if err != nil {
		t.Fatal(err)
	}
	if g.DriverVersion != "570.86.15" || g.NVMLVersion != "12.570.86.15" || g.CUDADriverVersion != 12080 {
		t.Errorf("versions: %+v", g)
	}
	if len(g.Devices) != 2 || g.Devices[1].UUID != "GPU-bbbb" || g.Devices[0].Name != "NVIDIA H200" || g.Devices[1].Index != 1 {
		t.Errorf("devices: %+v", g.Devices)
	}
	if shut != 1 {
		t.Errorf("NVML shut down %d times, want 1", shut)
	}
	none := &mock.Interface{InitFunc: func() nvml.Return { return nvml.ERROR_LIBRARY_NOT_FOUND }}
	if g, err := ManifestOf(none).ManifestGPU(); g != nil || err != nil {
		t.Errorf("no NVML: %+v, %v", g, err)
	}
}
