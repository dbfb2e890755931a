package main

// CRI stats from set usage, and the OOM-kill hook (see the package comment).

import (
	"context"
	"fmt"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	apitest "k8s.io/cri-api/pkg/apis/testing"
	fakeremote "k8s.io/cri-client/pkg/fake"
	kubetypes "k8s.io/kubelet/pkg/types"
)

type containerKey struct{ namespace, pod, container string }

type containerUsage struct {
	memoryBytes   uint64
	cpuMillicores uint64
}

// usageStore is the per-container usage set through the control endpoint; unset means zero.
type usageStore struct {
	mu sync.Mutex
	by map[containerKey]containerUsage
}

func newUsageStore() *usageStore { return &usageStore{by: map[containerKey]containerUsage{}} }

func (u *usageStore) set(k containerKey, v containerUsage) {
	u.mu.Lock()
	u.by[k] = v
	u.mu.Unlock()
}

func (u *usageStore) get(k containerKey) containerUsage {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.by[k]
}

func (u *usageStore) podMemory(namespace, pod string) uint64 {
	u.mu.Lock()
	defer u.mu.Unlock()
	var sum uint64
	for k, v := range u.by {
		if k.namespace == namespace && k.pod == pod {
			sum += v.memoryBytes
		}
	}
	return sum
}

func keyOf(c *apitest.FakeContainer) containerKey {
	return containerKey{
		namespace: c.Labels[kubetypes.KubernetesPodNamespaceLabel],
		pod:       c.Labels[kubetypes.KubernetesPodNameLabel],
		container: c.Labels[kubetypes.KubernetesContainerNameLabel],
	}
}

// statsRuntime is the CRI client with stats answered from usageStore for the fake runtime's
// running containers; every other call goes to the fake runtime over its socket.
type statsRuntime struct {
	internalapi.RuntimeService
	fake  *apitest.FakeRuntimeService
	usage *usageStore
}

func (s *statsRuntime) containerStats(c *apitest.FakeContainer, now int64) *runtimeapi.ContainerStats {
	u := s.usage.get(keyOf(c))
	cum := uint64(0)
	if c.StartedAt > 0 && now > c.StartedAt {
		cum = u.cpuMillicores * uint64(now-c.StartedAt) / 1000
	}
	return &runtimeapi.ContainerStats{
		Attributes: &runtimeapi.ContainerAttributes{
			Id: c.Id, Metadata: c.Metadata, Labels: c.Labels, Annotations: c.Annotations,
		},
		Cpu: &runtimeapi.CpuUsage{
			Timestamp:            now,
			UsageCoreNanoSeconds: &runtimeapi.UInt64Value{Value: cum},
			UsageNanoCores:       &runtimeapi.UInt64Value{Value: u.cpuMillicores * 1_000_000},
		},
		Memory: &runtimeapi.MemoryUsage{
			Timestamp:       now,
			UsageBytes:      &runtimeapi.UInt64Value{Value: u.memoryBytes},
			WorkingSetBytes: &runtimeapi.UInt64Value{Value: u.memoryBytes},
			RssBytes:        &runtimeapi.UInt64Value{Value: u.memoryBytes},
		},
	}
}

// running lists stats of the running containers matching sandbox (all when "") and id (all when "").
func (s *statsRuntime) running(sandbox, id string) []*runtimeapi.ContainerStats {
	now := time.Now().UnixNano()
	s.fake.Lock()
	defer s.fake.Unlock()
	var out []*runtimeapi.ContainerStats
	for _, c := range s.fake.Containers {
		if c.State != runtimeapi.ContainerState_CONTAINER_RUNNING ||
			(sandbox != "" && c.SandboxID != sandbox) || (id != "" && c.Id != id) {
			continue
		}
		out = append(out, s.containerStats(c, now))
	}
	return out
}

func (s *statsRuntime) ListContainerStats(_ context.Context, f *runtimeapi.ContainerStatsFilter) ([]*runtimeapi.ContainerStats, error) {
	return s.running(f.GetPodSandboxId(), f.GetId()), nil
}

func (s *statsRuntime) ContainerStats(_ context.Context, id string) (*runtimeapi.ContainerStats, error) {
	if cs := s.running("", id); len(cs) == 1 {
		return cs[0], nil
	}
	return nil, fmt.Errorf("container %q not found or not running", id)
}

func (s *statsRuntime) sandboxStats(id string) (*runtimeapi.PodSandboxStats, error) {
	s.fake.Lock()
	sb, ok := s.fake.Sandboxes[id]
	var attrs *runtimeapi.PodSandboxAttributes
	if ok {
		attrs = &runtimeapi.PodSandboxAttributes{Id: sb.Id, Metadata: sb.Metadata, Labels: sb.Labels, Annotations: sb.Annotations}
	}
	s.fake.Unlock()
	if !ok {
		return nil, fmt.Errorf("pod sandbox %q not found", id)
	}
	now := time.Now().UnixNano()
	cs := s.running(id, "")
	var mem, cpu, cum uint64
	for _, c := range cs {
		mem += c.Memory.UsageBytes.Value
		cpu += c.Cpu.UsageNanoCores.Value
		cum += c.Cpu.UsageCoreNanoSeconds.Value
	}
	return &runtimeapi.PodSandboxStats{
		Attributes: attrs,
		Linux: &runtimeapi.LinuxPodSandboxStats{
			Cpu: &runtimeapi.CpuUsage{Timestamp: now, UsageNanoCores: &runtimeapi.UInt64Value{Value: cpu},
				UsageCoreNanoSeconds: &runtimeapi.UInt64Value{Value: cum}},
			Memory: &runtimeapi.MemoryUsage{Timestamp: now, UsageBytes: &runtimeapi.UInt64Value{Value: mem},
				WorkingSetBytes: &runtimeapi.UInt64Value{Value: mem}, RssBytes: &runtimeapi.UInt64Value{Value: mem}},
			Containers: cs,
		},
	}, nil
}

func (s *statsRuntime) PodSandboxStats(_ context.Context, id string) (*runtimeapi.PodSandboxStats, error) {
	return s.sandboxStats(id)
}

func (s *statsRuntime) ListPodSandboxStats(_ context.Context, f *runtimeapi.PodSandboxStatsFilter) ([]*runtimeapi.PodSandboxStats, error) {
	s.fake.Lock()
	ids := make([]string, 0, len(s.fake.Sandboxes))
	for id, sb := range s.fake.Sandboxes {
		if sb.State == runtimeapi.PodSandboxState_SANDBOX_READY && (f.GetId() == "" || f.GetId() == id) {
			ids = append(ids, id)
		}
	}
	s.fake.Unlock()
	out := make([]*runtimeapi.PodSandboxStats, 0, len(ids))
	for _, id := range ids {
		if st, err := s.sandboxStats(id); err == nil {
			out = append(out, st)
		}
	}
	return out, nil
}

// UpdateContainerResources records what the fake runtime was asked to apply, so ContainerStatus can
// report it as a CRI runtime does (the fake runtime only counts the call).
func (s *statsRuntime) UpdateContainerResources(ctx context.Context, id string, r *runtimeapi.ContainerResources) error {
	if err := s.RuntimeService.UpdateContainerResources(ctx, id, r); err != nil {
		return err
	}
	if lr := r.GetLinux(); lr != nil {
		s.fake.Lock()
		if c, ok := s.fake.Containers[id]; ok {
			c.LinuxResources = proto.Clone(lr).(*runtimeapi.LinuxContainerResources)
		}
		s.fake.Unlock()
	}
	return nil
}

// ContainerStatus adds the container's applied Linux resources to the status, as containerd and
// CRI-O report them; the kubelet reads them in kuberuntime toKubeContainerResources.
func (s *statsRuntime) ContainerStatus(ctx context.Context, id string, verbose bool) (*runtimeapi.ContainerStatusResponse, error) {
	resp, err := s.RuntimeService.ContainerStatus(ctx, id, verbose)
	if err != nil || resp.GetStatus() == nil {
		return resp, err
	}
	s.fake.Lock()
	if c, ok := s.fake.Containers[id]; ok && c.LinuxResources != nil {
		resp.Status.Resources = &runtimeapi.ContainerResources{
			Linux: proto.Clone(c.LinuxResources).(*runtimeapi.LinuxContainerResources),
		}
	}
	s.fake.Unlock()
	return resp, nil
}

// oomKill marks the running container exited with 137/OOMKilled, as a runtime reports a cgroup
// OOM kill; the kubelet's PLEG relist then sees the exit.
func oomKill(fake *apitest.FakeRuntimeService, k containerKey) error {
	fake.Lock()
	defer fake.Unlock()
	for _, c := range fake.Containers {
		if keyOf(c) == k && c.State == runtimeapi.ContainerState_CONTAINER_RUNNING {
			c.State = runtimeapi.ContainerState_CONTAINER_EXITED
			c.ExitCode = 137
			c.Reason = "OOMKilled"
			c.Message = ""
			c.FinishedAt = time.Now().UnixNano()
			return nil
		}
	}
	return fmt.Errorf("no running container %s/%s/%s", k.namespace, k.pod, k.container)
}

// trimCallLog drops the fake runtime's record of calls, which otherwise grows without bound.
func trimCallLog(ctx context.Context, rt *fakeremote.RemoteRuntime) {
	t := time.NewTicker(30 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			rt.RuntimeService.Lock()
			rt.RuntimeService.Called = nil
			rt.RuntimeService.Unlock()
			rt.ImageService.Lock()
			rt.ImageService.Called = nil
			rt.ImageService.Unlock()
		}
	}
}
