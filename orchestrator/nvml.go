package orchestrator

import (
	"database/sql"
	"fmt"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/arbiterlab/arbiter/store"
)

// nvmlProbe reads GPUs through NVML, the NVIDIA driver's management library
// (libnvidia-ml.so.1), which go-nvml loads when a launch opens its GPUs: arbiter builds
// and runs on hosts without a driver, where Open says so.
type nvmlProbe struct{}

// nvmlMu serializes opening and closing NVML: launches of one wave start and end
// together, and NVML's reference count of its initializations is the driver's.
var nvmlMu sync.Mutex

// nvmlWhy says why NVML answered ret, in words for a verdict.
func nvmlWhy(what string, ret nvml.Return) error {
	switch ret {
	case nvml.ERROR_LIBRARY_NOT_FOUND:
		return fmt.Errorf("libnvidia-ml.so.1 not found (no NVIDIA driver on this host)")
	case nvml.ERROR_DRIVER_NOT_LOADED:
		return fmt.Errorf("the NVIDIA driver is not loaded on this host")
	case nvml.ERROR_NO_PERMISSION:
		return fmt.Errorf("NVML %s: no permission to read the GPUs", what)
	}
	return fmt.Errorf("NVML %s: %s", what, nvml.ErrorString(ret))
}

// Open initializes NVML and finds the devices (every GPU NVML sees when devices is nil).
func (nvmlProbe) Open(devices []int) (GPUReader, error) {
	nvmlMu.Lock()
	defer nvmlMu.Unlock()
	if ret := nvml.Init(); ret != nvml.SUCCESS {
		return nil, nvmlWhy("init", ret)
	}
	r := &nvmlReader{}
	fail := func(err error) (GPUReader, error) {
		nvml.Shutdown()
		return nil, err
	}
	n, ret := nvml.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return fail(nvmlWhy("device count", ret))
	}
	if n == 0 {
		return fail(fmt.Errorf("NVML sees no GPU on this host"))
	}
	if devices == nil {
		for i := range n {
			devices = append(devices, i)
		}
	}
	for _, d := range devices {
		if d >= n {
			return fail(fmt.Errorf("GPU %d is not on this host: NVML sees %d GPUs (0-%d)", d, n, n-1))
		}
		h, ret := nvml.DeviceGetHandleByIndex(d)
		if ret != nvml.SUCCESS {
			return fail(nvmlWhy(fmt.Sprintf("GPU %d", d), ret))
		}
		g := nvmlDevice{index: d, handle: h}
		g.uuid, _ = h.GetUUID() // "" where the driver gives none
		g.name, _ = h.GetName()
		r.devices = append(r.devices, g)
	}
	// NVML 13 renamed the throttle reasons "clocks event reasons"; an older driver has
	// only the first name, and a symbol the library lacks must not be called.
	ext := nvml.Extensions()
	r.eventReasons = ext.LookupSymbol("nvmlDeviceGetCurrentClocksEventReasons") == nil
	r.throttleReasons = ext.LookupSymbol("nvmlDeviceGetCurrentClocksThrottleReasons") == nil
	return r, nil
}

// nvmlDevice is one opened GPU.
type nvmlDevice struct {
	index      int
	handle     nvml.Device
	uuid, name string
}

// nvmlReader reads the opened GPUs.
type nvmlReader struct {
	devices                       []nvmlDevice
	eventReasons, throttleReasons bool
}

func (r *nvmlReader) Devices() []int {
	out := make([]int, len(r.devices))
	for i, d := range r.devices {
		out[i] = d.index
	}
	return out
}

func (r *nvmlReader) Read() ([]store.GPUSample, error) {
	var out []store.GPUSample
	var firstErr error
	for _, d := range r.devices {
		s := store.GPUSample{GPU: d.index, UUID: d.uuid, Name: d.name}
		ok := false
		// note keeps a reading's value, and the first failure other than a reading the
		// device does not have.
		note := func(ret nvml.Return, what string) bool {
			switch ret {
			case nvml.SUCCESS:
				ok = true
				return true
			case nvml.ERROR_NOT_SUPPORTED:
			default:
				if firstErr == nil {
					firstErr = nvmlWhy(fmt.Sprintf("GPU %d %s", d.index, what), ret)
				}
			}
			return false
		}
		integer := func(v uint32) sql.NullInt64 { return sql.NullInt64{Int64: int64(v), Valid: true} }
		if v, ret := d.handle.GetClockInfo(nvml.CLOCK_SM); note(ret, "SM clock") {
			s.SMClockMHz = integer(v)
		}
		if v, ret := d.handle.GetClockInfo(nvml.CLOCK_MEM); note(ret, "memory clock") {
			s.MemClockMHz = integer(v)
		}
		if v, ret := d.handle.GetPowerUsage(); note(ret, "power") {
			s.PowerW = sql.NullFloat64{Float64: float64(v) / 1000, Valid: true} // NVML says milliwatts
		}
		if v, ret := d.handle.GetTemperature(nvml.TEMPERATURE_GPU); note(ret, "temperature") {
			s.TempC = integer(v)
		}
		var mask uint64
		ret := nvml.ERROR_NOT_SUPPORTED
		switch {
		case r.eventReasons:
			mask, ret = d.handle.GetCurrentClocksEventReasons()
		case r.throttleReasons:
			mask, ret = d.handle.GetCurrentClocksThrottleReasons()
		}
		if note(ret, "throttle reasons") {
			s.ThrottleMask = sql.NullInt64{Int64: int64(mask), Valid: true}
		}
		if m, ret := d.handle.GetMemoryInfo(); note(ret, "memory") {
			s.MemUsedBytes = sql.NullInt64{Int64: int64(m.Used), Valid: true}
		}
		if u, ret := d.handle.GetUtilizationRates(); note(ret, "utilization") {
			s.UtilPct = integer(u.Gpu)
		}
		if ok {
			out = append(out, s)
		}
	}
	if len(out) == 0 && firstErr != nil {
		return nil, firstErr
	}
	return out, nil
}

func (r *nvmlReader) Close() {
	nvmlMu.Lock()
	defer nvmlMu.Unlock()
	nvml.Shutdown()
}
