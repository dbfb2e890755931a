package main

// The control endpoint on 127.0.0.1 (see the package comment).

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"

	apitest "k8s.io/cri-api/pkg/apis/testing"
	"k8s.io/klog/v2"
)

type containerRef struct {
	Namespace string `json:"namespace"`
	Pod       string `json:"pod"`
	Container string `json:"container"`
}

func (r containerRef) key() (containerKey, error) {
	if r.Namespace == "" || r.Pod == "" || r.Container == "" {
		return containerKey{}, fmt.Errorf("namespace, pod and container are required")
	}
	return containerKey{namespace: r.Namespace, pod: r.Pod, container: r.Container}, nil
}

type usageBody struct {
	containerRef
	MemoryBytes   *int64 `json:"memory_bytes"`
	CPUMillicores *int64 `json:"cpu_millicores"`
}

type allocBody struct {
	CPUMillicores int64 `json:"cpu_millicores"`
	MemoryBytes   int64 `json:"memory_bytes"`
}

type control struct {
	usage *usageStore
	res   *nodeResources
	fake  *apitest.FakeRuntimeService
}

func decode(w http.ResponseWriter, r *http.Request, into any) bool {
	if r.Method != http.MethodPost {
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return false
	}
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(into); err != nil {
		http.Error(w, "bad JSON: "+err.Error(), http.StatusBadRequest)
		return false
	}
	return true
}

func (c *control) setUsage(w http.ResponseWriter, r *http.Request) {
	var b usageBody
	if !decode(w, r, &b) {
		return
	}
	k, err := b.key()
	if err == nil && (b.MemoryBytes == nil || b.CPUMillicores == nil || *b.MemoryBytes < 0 || *b.CPUMillicores < 0) {
		err = fmt.Errorf("memory_bytes and cpu_millicores are required and must be >= 0")
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	c.usage.set(k, containerUsage{memoryBytes: uint64(*b.MemoryBytes), cpuMillicores: uint64(*b.CPUMillicores)})
	w.WriteHeader(http.StatusNoContent)
}

func (c *control) setAllocatable(w http.ResponseWriter, r *http.Request) {
	var b allocBody
	if !decode(w, r, &b) {
		return
	}
	if err := c.res.setAllocatable(b.CPUMillicores, b.MemoryBytes); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	klog.InfoS("allocatable changed", "cpuMillicores", b.CPUMillicores, "memoryBytes", b.MemoryBytes)
	w.WriteHeader(http.StatusNoContent)
}

func (c *control) oom(w http.ResponseWriter, r *http.Request) {
	var b containerRef
	if !decode(w, r, &b) {
		return
	}
	k, err := b.key()
	if err == nil {
		err = oomKill(c.fake, k)
		if err != nil {
			http.Error(w, err.Error(), http.StatusNotFound)
			return
		}
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func startControl(port int, u *usageStore, res *nodeResources, fake *apitest.FakeRuntimeService) (*http.Server, error) {
	c := &control{usage: u, res: res, fake: fake}
	mux := http.NewServeMux()
	mux.HandleFunc("/usage", c.setUsage)
	mux.HandleFunc("/allocatable", c.setAllocatable)
	mux.HandleFunc("/oom", c.oom)
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return nil, fmt.Errorf("control endpoint: %w", err)
	}
	srv := &http.Server{Handler: mux}
	go func() { _ = srv.Serve(ln) }()
	return srv, nil
}
