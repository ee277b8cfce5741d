package gpu

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Reasons are the clock event (throttle) reasons NVML defines, by bit.
var Reasons = []struct {
	Bit  uint64
	Name string
}{
	{nvml.ClocksEventReasonGpuIdle, "gpu_idle"},
	{nvml.ClocksEventReasonApplicationsClocksSetting, "applications_clocks_setting"},
	{nvml.ClocksEventReasonSwPowerCap, "sw_power_cap"},
	{nvml.ClocksThrottleReasonHwSlowdown, "hw_slowdown"},
	{nvml.ClocksEventReasonSyncBoost, "sync_boost"},
	{nvml.ClocksEventReasonSwThermalSlowdown, "sw_thermal_slowdown"},
	{nvml.ClocksThrottleReasonHwThermalSlowdown, "hw_thermal_slowdown"},
	{nvml.ClocksThrottleReasonHwPowerBrakeSlowdown, "hw_power_brake_slowdown"},
	{nvml.ClocksEventReasonDisplayClockSetting, "display_clock_setting"},
	{nvml.ClocksEventReasonBoardLimit, "board_limit"},
	{nvml.ClocksEventReasonReliability, "reliability"},
}

// ReasonName names one clock event reason bit.
func ReasonName(bit uint64) string {
	for _, r := range Reasons {
		if r.Bit == bit {
			return r.Name
		}
	}
	return fmt.Sprintf("bit_%d", trailingZeros(bit))
}

func trailingZeros(v uint64) int {
	n := 0
	for v != 0 && v&1 == 0 {
		v >>= 1
		n++
	}
	return n
}
