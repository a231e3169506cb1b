//go:build linux && kernel

package nodeagent

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/pinfold/pinfold/cgroup"
	"github.com/pinfold/pinfold/planner/cpuset"
	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/test/testenv"
)

func TestMain(m *testing.M) {
	testenv.HelperMain()
	os.Exit(m.Run())
}

// TestKernelFragmentShares measures how the two fragment schemes split a
// shared CPU on a real kernel: instance a (1.7: CPU 0 whole + 70 pieces of
// CPU 2) and b (1.3: CPU 1 whole + 30 pieces of CPU 2), each with two busy
// threads (its whole CPU and the shared one saturated). The cgroup files are
// exactly what Map gives the agent; each instance's share of CPU 2 is its
// CPU time minus its whole CPU, from cpu.stat over 6 s. The default scheme
// (DefaultScheme, capped) must land within 0.12 CPU of the plan.
func TestKernelFragmentShares(t *testing.T) {
	testenv.RequireKernel(t)
	m, err := cgroup.OpenHost(fmt.Sprintf("pinfold-shares-%d", os.Getpid()))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if m.HostCPUs().Len() < 3 {
		t.Fatalf("need 3 CPUs, the guest has %s", m.HostCPUs())
	}
	h := Host{CPUs: m.HostCPUs(), Mems: m.HostMems(), ShareBase: 100}
	a := model.Instance{ID: "a", Allocation: model.Allocation{Bind: true, CPUs: map[cpuset.CPUID]int{0: 100, 2: 70}, NUMANode: -1, Memory: 64 << 20}}
	b := model.Instance{ID: "b", Allocation: model.Allocation{Bind: true, CPUs: map[cpuset.CPUID]int{1: 100, 2: 30}, NUMANode: -1, Memory: 64 << 20}}
	for _, scheme := range Schemes {
		var shares [2]float64
		var paths [2]cgroup.Path
		var procs []*exec.Cmd
		for i, in := range []model.Instance{a, b} {
			w := Map(h, in, scheme, h.CPUs)
			p, _ := m.Parent().Child(fmt.Sprintf("%s-%s", scheme, in.ID))
			paths[i] = p
			spec := cgroup.Spec{Path: p, CPUs: &w.Resources.CPUs, Mems: &w.Resources.Mems, CPUWeight: w.CPUWeight,
				CPUMax: &cgroup.CPUMax{Quota: cgroup.Max}}
			if w.Resources.CPUQuota > 0 {
				spec.CPUMax = &cgroup.CPUMax{Quota: w.Resources.CPUQuota, Period: 100000}
			}
			if err := m.Apply(context.Background(), spec); err != nil {
				t.Fatal(err)
			}
			for range 2 {
				cmd := testenv.StartHelper(t, "spin")
				procs = append(procs, cmd)
				if err := m.AddProc(p, cmd.Process.Pid); err != nil {
					t.Fatal(err)
				}
			}
		}
		time.Sleep(time.Second)
		var before [2]uint64
		for i, p := range paths {
			st, _ := m.Stats(p)
			before[i] = st.CPUUsageUsec
		}
		t0 := time.Now()
		time.Sleep(6 * time.Second)
		wall := float64(time.Since(t0).Microseconds())
		for i, p := range paths {
			st, _ := m.Stats(p)
			shares[i] = float64(st.CPUUsageUsec-before[i])/wall - 1
		}
		wa, _ := m.Read(paths[0], "cpu.weight")
		wb, _ := m.Read(paths[1], "cpu.weight")
		qa, _ := m.Read(paths[0], "cpu.max")
		t.Logf("scheme %-6s: shared CPU 2 split a(1.7) %.3f / b(1.3) %.3f of a CPU (plan 0.70 / 0.30); cpu.weight a=%s b=%s, cpu.max a=%q",
			scheme, shares[0], shares[1], wa, wb, qa)
		for _, c := range procs {
			c.Process.Kill()
			c.Wait()
		}
		for _, p := range paths {
			_ = m.Remove(context.Background(), p)
		}
		if scheme == DefaultScheme {
			if d := shares[0] - 0.70; d < -0.12 || d > 0.12 {
				t.Errorf("default scheme %s: a got %.3f of the shared CPU, plan 0.70", scheme, shares[0])
			}
			if d := shares[1] - 0.30; d < -0.12 || d > 0.12 {
				t.Errorf("default scheme %s: b got %.3f of the shared CPU, plan 0.30", scheme, shares[1])
			}
		}
	}
	os.Remove(fmt.Sprintf("/sys/fs/cgroup/pinfold-shares-%d", os.Getpid()))
}
