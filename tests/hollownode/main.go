// Command hollow-node runs the real kubelet of Kubernetes v1.37.2 (cmd/kubelet/app.RunKubelet,
// reached through k8s.io/kubernetes/pkg/kubemark.NewHollowKubelet) over the CRI fake runtime
// (k8s.io/cri-client/pkg/fake), as one node of podtailor's test cluster. Everything that decides a
// resize — admission, Infeasible vs Deferred, the PodResizePending/PodResizeInProgress conditions,
// observedGeneration, resources/allocatedResources, container restarts — is the kubelet's own code.
// It needs no root, cgroups or container runtime, and every port it opens binds 127.0.0.1. The node's
// InternalIP is the host address the kubelet picks itself (it refuses a loopback --node-ip,
// nodestatus validateNodeIP); nothing connects to it.
//
// It replaces only what the stock kubemark fakes lack; what each replacement changes:
//
//   - Pod container manager (cm.NewStubContainerManager's podContainerManagerStub answers "not
//     implemented" to GetPodCgroupConfig/SetPodCgroupConfig, so every in-place resize ends in
//     PodResizeInProgress/Error): memPodCgroups keeps each pod's cgroup ResourceConfig in memory,
//     initialised from cm.ResourceConfigForPod at EnsureExists and updated by SetPodCgroupConfig, so
//     kuberuntime's doPodResizeAction runs its whole ordering (pod cgroup up, containers, pod cgroup
//     down) and the resize completes or fails as in a real node.
//
//   - Node capacity (cadvisor/testing.Fake is fixed at 1 core / 3.75 GiB): machineInfo reports the
//     --cpu cores and --memory bytes chosen per node; allocatable is capacity minus a reservation
//     that the control endpoint can change at run time (ContainerManager.GetNodeAllocatableReservation,
//     read by nodestatus.MachineInfo at every status update).
//
//   - Container and pod stats (the fake runtime has none, so validateMemoryResizeAction in
//     kuberuntime_manager.go cannot read usage): statsRuntime answers ListContainerStats,
//     ContainerStats, PodSandboxStats and ListPodSandboxStats from per-container usage set through the
//     control endpoint (feature gate PodAndContainerStatsFromCRI is turned on so pod stats come from
//     the CRI too). A pod's usage is the sum of its running containers'.
//
//   - OOM kills (none in the fake runtime): the control endpoint marks a running container exited
//     with code 137 and reason OOMKilled; the kubelet's PLEG then sees it and restarts it per the
//     pod's restartPolicy (restartCount, lastState.terminated OOMKilled).
//
//   - Events (NewHollowKubelet installs record.FakeRecorder, dropping them): a real broadcaster posts
//     the kubelet's Events to the API server. The real recorder makes the kubelet start its OOM
//     watcher on /dev/kmsg (pkg/kubelet/oom.NewWatcher); where /dev/kmsg cannot be opened the node
//     falls back to the fake recorder and logs that events are dropped.
//
//   - Applied container resources (the fake runtime neither keeps what UpdateContainerResources set
//     nor reports resources in ContainerStatus): statsRuntime keeps them and reports them, as
//     containerd does, so status.containerStatuses[].resources comes from the runtime's view.
//
//   - Directories and periods: a fixed --root-dir per node (allocation checkpoints survive a
//     restart; the fake runtime's containers do not, the kubelet recreates them), the CRI socket
//     inside it and removed on SIGTERM, and settable node-status and sync periods.
//
//   - CPU Manager policy (the stub reports none): --cpu-manager-policy=static makes GetNodeConfig report
//     "static", so the resize admit handler (pkg/kubelet/allocation/handlers.go) answers Infeasible for a
//     Guaranteed pod's CPU resize, as on a node with the static policy; no CPUs are pinned.
//
// The prober stays kubemark's always-Ready fake. Not replaced either: the kubelet's /stats/summary
// fails ("failed to get root cgroup stats": cadvisor/testing.Fake's ContainerInfoV2 has no root
// container, pkg/kubelet/server/stats/summary.go summaryProviderImpl.Get), so eviction thresholds are
// off (EvictionHard below) and metrics-server could not read these nodes. Nothing in podtailor reads
// it: usage reaches Prometheus through the node simulator's follow mode (tests/nodesim/follow.py).
//
// Control endpoint (--control-port, 127.0.0.1 only), JSON bodies:
//
//	POST /usage        {"namespace","pod","container","memory_bytes","cpu_millicores"}
//	POST /allocatable  {"cpu_millicores","memory_bytes"}  (must not exceed capacity)
//	POST /oom          {"namespace","pod","container"}
//	GET  /healthz
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	v1 "k8s.io/api/core/v1"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	clientset "k8s.io/client-go/kubernetes"
	v1core "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/record"
	remote "k8s.io/cri-client/pkg"
	fakeremote "k8s.io/cri-client/pkg/fake"
	"k8s.io/klog/v2"
	kubeletapp "k8s.io/kubernetes/cmd/kubelet/app"
	"k8s.io/kubernetes/cmd/kubelet/app/options"
	"k8s.io/kubernetes/pkg/api/legacyscheme"
	kubeletconfig "k8s.io/kubernetes/pkg/kubelet/apis/config"
	"k8s.io/kubernetes/pkg/kubelet/cm"
	"k8s.io/kubernetes/pkg/kubemark"
)

type nodeFlags struct {
	kubeconfig   string
	name         string
	rootDir      string
	kubeletPort  int
	controlPort  int
	cpuCores     int
	memoryBytes  int64
	maxPods      int
	labels       string
	taint        string
	cpuManager   string
	statusPeriod time.Duration
	syncPeriod   time.Duration
}

func parseFlags() *nodeFlags {
	nf := &nodeFlags{}
	fs := flag.NewFlagSet("hollow-node", flag.ExitOnError)
	klog.InitFlags(fs)
	fs.StringVar(&nf.kubeconfig, "kubeconfig", "", "kubeconfig of the API server (required)")
	fs.StringVar(&nf.name, "name", "", "node name (required)")
	fs.StringVar(&nf.rootDir, "root-dir", "", "fixed kubelet root directory for this node (required)")
	fs.IntVar(&nf.kubeletPort, "kubelet-port", 0, "kubelet HTTPS port on 127.0.0.1 (required)")
	fs.IntVar(&nf.controlPort, "control-port", 0, "control endpoint port on 127.0.0.1 (required)")
	fs.IntVar(&nf.cpuCores, "cpu", 4, "CPU capacity in whole cores")
	fs.Int64Var(&nf.memoryBytes, "memory", 8<<30, "memory capacity in bytes")
	fs.IntVar(&nf.maxPods, "max-pods", 110, "pod capacity")
	fs.StringVar(&nf.labels, "node-labels", "", "comma-separated key=value node labels")
	fs.StringVar(&nf.cpuManager, "cpu-manager-policy", "none", "CPU Manager policy the resize admit handler sees: none or static")
	fs.StringVar(&nf.taint, "register-with-taint", "", "one taint key=value:Effect to register the node with")
	fs.DurationVar(&nf.statusPeriod, "node-status-period", 10*time.Second, "nodeStatusUpdateFrequency")
	fs.DurationVar(&nf.syncPeriod, "sync-period", 10*time.Second, "syncFrequency (pod resync)")
	_ = fs.Parse(os.Args[1:])
	return nf
}

func (nf *nodeFlags) validate() error {
	switch {
	case nf.kubeconfig == "" || nf.name == "" || nf.rootDir == "":
		return fmt.Errorf("--kubeconfig, --name and --root-dir are required")
	case nf.kubeletPort <= 0 || nf.controlPort <= 0:
		return fmt.Errorf("--kubelet-port and --control-port are required")
	case nf.cpuCores <= 0 || nf.memoryBytes <= 0:
		return fmt.Errorf("--cpu and --memory must be positive")
	case nf.cpuManager != "none" && nf.cpuManager != "static":
		return fmt.Errorf("--cpu-manager-policy must be none or static, not %q", nf.cpuManager)
	}
	return nil
}

func parseLabels(s string) (map[string]string, error) {
	out := map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		if kv == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("bad node label %q (want key=value)", kv)
		}
		out[k] = v
	}
	return out, nil
}

func parseTaint(s string) ([]v1.Taint, error) {
	if s == "" {
		return nil, nil
	}
	kv, effect, ok := strings.Cut(s, ":")
	k, v, _ := strings.Cut(kv, "=")
	if !ok || k == "" || effect == "" {
		return nil, fmt.Errorf("bad taint %q (want key=value:Effect)", s)
	}
	return []v1.Taint{{Key: k, Value: v, Effect: v1.TaintEffect(effect)}}, nil
}

func main() {
	nf := parseFlags()
	if err := nf.validate(); err != nil {
		fmt.Fprintln(os.Stderr, "hollow-node:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := run(ctx, nf); err != nil {
		fmt.Fprintln(os.Stderr, "hollow-node:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, nf *nodeFlags) error {
	labels, err := parseLabels(nf.labels)
	if err != nil {
		return err
	}
	taints, err := parseTaint(nf.taint)
	if err != nil {
		return err
	}
	// Stats for pods come from the CRI (statsRuntime), not from cAdvisor's cgroups
	// (pkg/kubelet/stats/cri_stats_provider.go PodCPUAndMemoryStats, useCRIPodSandboxStats).
	if err := utilfeature.DefaultMutableFeatureGate.SetFromMap(map[string]bool{"PodAndContainerStatsFromCRI": true}); err != nil {
		return fmt.Errorf("feature gates: %w", err)
	}
	if err := os.MkdirAll(nf.rootDir, 0o755); err != nil {
		return err
	}
	client, heartbeat, err := clients(nf)
	if err != nil {
		return err
	}
	res := newNodeResources(int64(nf.cpuCores)*1000, nf.memoryBytes)
	usage := newUsageStore()

	sock := filepath.Join(nf.rootDir, "cri.sock")
	_ = os.Remove(sock) // a socket left by a killed predecessor
	endpoint := "unix://" + sock
	fakeRuntime := fakeremote.NewFakeRemoteRuntime()
	if err := fakeRuntime.Start(endpoint); err != nil {
		return fmt.Errorf("start fake runtime: %w", err)
	}
	defer func() { fakeRuntime.Stop(); _ = os.Remove(sock) }()
	go trimCallLog(ctx, fakeRuntime)
	rs, err := remote.NewRemoteRuntimeServiceBuilder().WithEndpoint(endpoint).
		WithConnectionTimeout(15 * time.Second).Build(ctx)
	if err != nil {
		return fmt.Errorf("runtime client: %w", err)
	}
	runtimeSvc := &statsRuntime{RuntimeService: rs, fake: fakeRuntime.RuntimeService, usage: usage}
	containers := &hollowContainerManager{
		ContainerManager: cm.NewStubContainerManager(),
		pods:             newMemPodCgroups(usage),
		res:              res,
		cpuPolicy:        nf.cpuManager,
	}
	f, c := kubeletConfig(nf, labels, taints)
	hk := kubemark.NewHollowKubelet(f, c, client, heartbeat,
		&machineInfo{nodeName: nf.name, res: res}, fakeRuntime.ImageService, runtimeSvc, containers)
	hk.KubeletDeps.Recorder = eventRecorder(ctx, client, nf.name)

	ctl, err := startControl(nf.controlPort, usage, res, fakeRuntime.RuntimeService)
	if err != nil {
		return err
	}
	defer ctl.Close()
	if err := kubeletapp.RunKubelet(ctx, &options.KubeletServer{
		KubeletFlags: *hk.KubeletFlags, KubeletConfiguration: *hk.KubeletConfiguration,
	}, hk.KubeletDeps); err != nil {
		return fmt.Errorf("run kubelet: %w", err)
	}
	klog.InfoS("hollow node running", "node", nf.name, "kubeletPort", nf.kubeletPort, "controlPort", nf.controlPort)
	<-ctx.Done()
	klog.InfoS("hollow node stopping", "node", nf.name)
	return nil
}

func clients(nf *nodeFlags) (*clientset.Clientset, *clientset.Clientset, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", nf.kubeconfig)
	if err != nil {
		return nil, nil, fmt.Errorf("kubeconfig: %w", err)
	}
	cfg.UserAgent = "hollow-kubelet"
	cfg.QPS, cfg.Burst = 50, 100
	client, err := clientset.NewForConfig(cfg)
	if err != nil {
		return nil, nil, err
	}
	hb := *cfg
	hb.QPS = -1 // as cmd/kubemark/app/hollow_node.go: heartbeats are not rate limited
	hb.Timeout = nf.statusPeriod
	if hb.Timeout < 5*time.Second {
		hb.Timeout = 5 * time.Second
	}
	heartbeat, err := clientset.NewForConfig(&hb)
	return client, heartbeat, err
}

// kubeletConfig starts from kubemark.GetHollowKubeletConfig and pins directories, addresses and
// periods. GetHollowKubeletConfig makes a root directory with static-pods and pod-logs inside it
// under /tmp itself (test/utils/tmpdir.go MakeTempDirOrDie: "/tmp" when no base is given, not
// TMPDIR); the fixed ones below replace them, so that directory is removed at once (one was left
// in /tmp per node start before).
func kubeletConfig(nf *nodeFlags, labels map[string]string, taints []v1.Taint) (*options.KubeletFlags, *kubeletconfig.KubeletConfiguration) {
	f, c := kubemark.GetHollowKubeletConfig(&kubemark.HollowKubeletOptions{
		NodeName: nf.name, KubeletPort: nf.kubeletPort, KubeletReadOnlyPort: 0,
		MaxPods: nf.maxPods, NodeLabels: labels, RegisterWithTaints: taints,
	})
	if made := f.RootDirectory; strings.HasPrefix(filepath.Base(made), "hollow-kubelet.") {
		_ = os.RemoveAll(made)
	}
	f.RootDirectory = nf.rootDir
	f.CertDirectory = filepath.Join(nf.rootDir, "pki")
	c.StaticPodPath = mkdir(nf.rootDir, "static-pods")
	c.PodLogsDir = mkdir(nf.rootDir, "pod-logs")
	c.Address = "127.0.0.1"
	c.HealthzBindAddress = "127.0.0.1"
	c.HealthzPort = 0
	c.ReadOnlyPort = 0
	c.NodeStatusUpdateFrequency.Duration = nf.statusPeriod
	c.SyncFrequency.Duration = nf.syncPeriod
	c.EvictionHard = map[string]string{} // the fake cAdvisor has no node-level usage to evict on
	c.FeatureGates = map[string]bool{"PodAndContainerStatsFromCRI": true}
	return f, c
}

func mkdir(root, name string) string {
	p := filepath.Join(root, name)
	_ = os.MkdirAll(p, 0o755)
	return p
}

// eventRecorder posts the kubelet's Events to the API server, as cmd/kubelet/app/server.go
// makeEventRecorder does, unless /dev/kmsg cannot be opened (see the package comment).
func eventRecorder(ctx context.Context, client *clientset.Clientset, node string) record.EventRecorderLogger {
	if fh, err := os.Open("/dev/kmsg"); err != nil {
		klog.InfoS("cannot open /dev/kmsg; kubelet events are dropped on this node", "err", err)
		return &record.FakeRecorder{}
	} else {
		_ = fh.Close()
	}
	b := record.NewBroadcaster(record.WithContext(ctx))
	b.StartRecordingToSink(&v1core.EventSinkImpl{Interface: client.CoreV1().Events("")})
	return b.NewRecorder(legacyscheme.Scheme, v1.EventSource{Component: "kubelet", Host: node})
}
