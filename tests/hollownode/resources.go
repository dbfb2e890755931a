package main

// Node capacity and allocatable, and the in-memory pod cgroups (see the package comment).

import (
	"fmt"
	"strings"
	"sync"

	cadvisorapi "github.com/google/cadvisor/lib/model"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	kubeletconfig "k8s.io/kubernetes/pkg/kubelet/apis/config"
	cadvisortest "k8s.io/kubernetes/pkg/kubelet/cadvisor/testing"
	"k8s.io/kubernetes/pkg/kubelet/cm"
)

// nodeResources holds the node's fixed capacity and its run-time allocatable.
type nodeResources struct {
	mu                 sync.Mutex
	capCPU, capMemory  int64 // millicores, bytes
	allocCPU, allocMem int64
}

func newNodeResources(cpuMilli, memBytes int64) *nodeResources {
	return &nodeResources{capCPU: cpuMilli, capMemory: memBytes, allocCPU: cpuMilli, allocMem: memBytes}
}

func (r *nodeResources) setAllocatable(cpuMilli, memBytes int64) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if cpuMilli <= 0 || memBytes <= 0 || cpuMilli > r.capCPU || memBytes > r.capMemory {
		return fmt.Errorf("allocatable cpu=%dm memory=%d must be positive and within capacity cpu=%dm memory=%d",
			cpuMilli, memBytes, r.capCPU, r.capMemory)
	}
	r.allocCPU, r.allocMem = cpuMilli, memBytes
	return nil
}

// reservation is capacity minus allocatable: nodestatus.MachineInfo (pkg/kubelet/nodestatus/setters.go)
// subtracts it from capacity to publish allocatable at every node status update.
func (r *nodeResources) reservation() v1.ResourceList {
	r.mu.Lock()
	defer r.mu.Unlock()
	return v1.ResourceList{
		v1.ResourceCPU:    *resource.NewMilliQuantity(r.capCPU-r.allocCPU, resource.DecimalSI),
		v1.ResourceMemory: *resource.NewQuantity(r.capMemory-r.allocMem, resource.BinarySI),
	}
}

// machineInfo is cadvisortest.Fake with the node's own capacity. The kubelet caches MachineInfo at
// start (Kubelet.setCachedMachineInfo), so capacity is fixed for the process's life.
type machineInfo struct {
	cadvisortest.Fake
	nodeName string
	res      *nodeResources
}

func (m *machineInfo) MachineInfo(_ klog.Logger) (*cadvisorapi.MachineInfo, error) {
	return &cadvisorapi.MachineInfo{
		NumCores:       int(m.res.capCPU / 1000),
		InstanceID:     cadvisorapi.InstanceID(m.nodeName),
		MemoryCapacity: uint64(m.res.capMemory),
	}, nil
}

// hollowContainerManager is the stub container manager with pod cgroups kept in memory and a
// run-time allocatable reservation.
type hollowContainerManager struct {
	cm.ContainerManager
	pods      *memPodCgroups
	res       *nodeResources
	cpuPolicy string
}

func (h *hollowContainerManager) GetNodeConfig() cm.NodeConfig {
	c := h.ContainerManager.GetNodeConfig()
	c.CPUManagerPolicy = h.cpuPolicy
	return c
}

func (h *hollowContainerManager) NewPodContainerManager() cm.PodContainerManager { return h.pods }

func (h *hollowContainerManager) GetNodeAllocatableReservation() v1.ResourceList {
	return h.res.reservation()
}

// memPodCgroups implements cm.PodContainerManager over a map from pod UID to its cgroup values,
// standing in for pod_container_manager_linux.go's cgroupfs reads and writes.
type memPodCgroups struct {
	mu    sync.Mutex
	pods  map[types.UID]*cm.ResourceConfig
	usage *usageStore
}

var _ cm.PodContainerManager = (*memPodCgroups)(nil)

func newMemPodCgroups(u *usageStore) *memPodCgroups {
	return &memPodCgroups{pods: map[types.UID]*cm.ResourceConfig{}, usage: u}
}

const podPrefix = "pod"

func (m *memPodCgroups) GetPodContainerName(pod *v1.Pod) (cm.CgroupName, string) {
	name := cm.CgroupName{"kubepods", podPrefix + string(pod.UID)}
	return name, "/" + strings.Join(name, "/")
}

// initial is the pod cgroup the kubelet would create: cm.ResourceConfigForPod with CFS quota on
// and the default 100ms period, as pod_container_manager_linux.go EnsureExists.
func initial(pod *v1.Pod) *cm.ResourceConfig {
	rc := cm.ResourceConfigForPod(pod, true, 100000, false, kubeletconfig.NoneMemoryReservationPolicy)
	if rc == nil {
		rc = &cm.ResourceConfig{}
	}
	return rc
}

func (m *memPodCgroups) EnsureExists(_ klog.Logger, pod *v1.Pod) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.pods[pod.UID]; !ok {
		m.pods[pod.UID] = initial(pod)
	}
	return nil
}

func (m *memPodCgroups) Exists(pod *v1.Pod) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.pods[pod.UID]
	return ok
}

func uidOf(name cm.CgroupName) (types.UID, bool) {
	if len(name) == 0 || !strings.HasPrefix(name[len(name)-1], podPrefix) {
		return "", false
	}
	return types.UID(strings.TrimPrefix(name[len(name)-1], podPrefix)), true
}

func (m *memPodCgroups) Destroy(_ klog.Logger, name cm.CgroupName) error {
	if uid, ok := uidOf(name); ok {
		m.mu.Lock()
		delete(m.pods, uid)
		m.mu.Unlock()
	}
	return nil
}

func (m *memPodCgroups) ReduceCPULimits(_ klog.Logger, _ cm.CgroupName) error { return nil }

func (m *memPodCgroups) GetAllPodsFromCgroups(_ klog.Logger) (map[types.UID]cm.CgroupName, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[types.UID]cm.CgroupName, len(m.pods))
	for uid := range m.pods {
		out[uid] = cm.CgroupName{"kubepods", podPrefix + string(uid)}
	}
	return out, nil
}

func (m *memPodCgroups) IsPodCgroup(cgroupfs string) (bool, types.UID) {
	uid, ok := uidOf(strings.Split(strings.Trim(cgroupfs, "/"), "/"))
	return ok, uid
}

func (m *memPodCgroups) GetPodCgroupMemoryUsage(pod *v1.Pod) (uint64, error) {
	return m.usage.podMemory(pod.Namespace, pod.Name), nil
}

// GetPodCgroupConfig returns the stored values of one resource, as cgroup_v2_manager_linux.go
// GetCgroupConfig reads cpu.max/cpu.weight or memory.max.
func (m *memPodCgroups) GetPodCgroupConfig(pod *v1.Pod, name v1.ResourceName) (*cm.ResourceConfig, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	rc, ok := m.pods[pod.UID]
	if !ok {
		rc = initial(pod)
		m.pods[pod.UID] = rc
	}
	// Unset values read as a cgroup without them does: "max" is -1 (readCgroupMemoryConfig and
	// getCgroupCPUConfig in pkg/kubelet/cm), the period defaults to 100ms, the weight to the minimum.
	orDefault := func(p *int64, d int64) *int64 {
		if p != nil {
			return p
		}
		return &d
	}
	switch name {
	case v1.ResourceCPU:
		shares, period := uint64(cm.MinShares), uint64(100000)
		if rc.CPUShares != nil {
			shares = *rc.CPUShares
		}
		if rc.CPUPeriod != nil {
			period = *rc.CPUPeriod
		}
		return &cm.ResourceConfig{CPUShares: &shares, CPUQuota: orDefault(rc.CPUQuota, -1), CPUPeriod: &period}, nil
	case v1.ResourceMemory:
		return &cm.ResourceConfig{Memory: orDefault(rc.Memory, -1)}, nil
	}
	return nil, fmt.Errorf("unsupported resource %v for pod %s/%s", name, pod.Namespace, pod.Name)
}

// SetPodCgroupConfig writes the fields that are set, as cgroup_v2_manager_linux.go SetCgroupConfig.
func (m *memPodCgroups) SetPodCgroupConfig(_ klog.Logger, pod *v1.Pod, in *cm.ResourceConfig) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	rc, ok := m.pods[pod.UID]
	if !ok {
		rc = initial(pod)
		m.pods[pod.UID] = rc
	}
	if in.Memory != nil {
		rc.Memory = in.Memory
	}
	if in.CPUShares != nil {
		rc.CPUShares = in.CPUShares
	}
	if in.CPUQuota != nil {
		rc.CPUQuota = in.CPUQuota
	}
	if in.CPUPeriod != nil {
		rc.CPUPeriod = in.CPUPeriod
	}
	return nil
}
