//go:build linux && e2e

package e2e_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/pinfold/pinfold/test/testenv"
)

// TestE2EVolumes: planner + agent + dockerd in the guest. An instance
// deployed with a bind mount and a named volume (and a restart policy, a
// label, a workdir, a read-only root and a dropped capability) writes a
// file through each on start: the file is on the guest's directory and in
// the volume's directory; the container has every setting; rebalance keeps
// it in place and says why.
func TestE2EVolumes(t *testing.T) {
	testenv.RequireKernel(t)
	testenv.RequireDocker(t)
	image := testenv.Image(t)
	dir := t.TempDir()
	startPlanner(t, dir+"/planner", "warn")
	daemon(t, "agent", "agent", "--planner", plannerAddr, "--host", "vm", "--state-dir", dir+"/agent", "--resync", "1s", "--health-wait", "2s")
	eventually(t, 60*time.Second, "host vm up", func() (bool, string) {
		out, _, _ := pinfold(t, "", "host", "list", "-o", "json", "--planner", plannerAddr)
		return strings.Contains(out, `"state": "up"`) && strings.Contains(out, `"agent": true`), out
	})
	bindDir := dir + "/bind"
	if err := os.MkdirAll(bindDir, 0o755); err != nil {
		t.Fatal(err)
	}
	const volume = "pinfold-e2e-vol"
	t.Cleanup(func() { exec.Command("docker", "volume", "rm", "-f", volume).Run() })

	// A bad volume is refused before anything is placed.
	if _, errOut, code := pinfold(t, "", "deploy", "vol", "--memory", "32MiB", "--image", image, "--volume", "x:y", "--planner", plannerAddr); code != 2 ||
		!strings.Contains(errOut, `volume "x:y": container path "y" is not absolute`) {
		t.Fatalf("deploy --volume x:y: exit %d, %s; want 2 naming it", code, errOut)
	}
	if _, errOut, code := pinfold(t, "", "deploy", "vol", "--count", "1", "--cpu", "0.5", "--memory", "32MiB", "--image", image,
		"--volume", bindDir+":/data", "--volume", volume+":/vol", "--restart", "on-failure:2", "--label", "team=e2e",
		"--workdir", "/vol", "--read-only", "--cap-drop", "NET_RAW", "--planner", plannerAddr,
		"--", "sh", "-c", "echo bind > /data/out && echo named > out && sleep 3600"); code != 0 {
		t.Fatalf("deploy: %s", errOut)
	}
	id := runningInstance(t, "vol")
	eventually(t, 30*time.Second, "the file through the bind mount", func() (bool, string) {
		b, err := os.ReadFile(bindDir + "/out")
		return err == nil && string(b) == "bind\n", string(b)
	})
	out, err := exec.Command("docker", "volume", "inspect", "-f", "{{.Mountpoint}}", volume).Output()
	if err != nil {
		t.Fatalf("docker volume inspect %s: %v (the engine made no such volume)", volume, err)
	}
	if b, err := os.ReadFile(strings.TrimSpace(string(out)) + "/out"); err != nil || string(b) != "named\n" {
		t.Errorf("the named volume's out = %q, %v; want \"named\\n\" written through /vol (the workdir)", b, err)
	}
	c := byID(ps(t), id).Container
	raw, err := exec.Command("docker", "inspect", c).Output()
	if err != nil {
		t.Fatal(err)
	}
	var ins []struct {
		Config struct {
			Labels     map[string]string
			WorkingDir string
		}
		HostConfig struct {
			Binds          []string
			ReadonlyRootfs bool
			CapDrop        []string
			RestartPolicy  struct {
				Name              string
				MaximumRetryCount int
			}
		}
	}
	if err := json.Unmarshal(raw, &ins); err != nil || len(ins) != 1 {
		t.Fatalf("docker inspect: %v", err)
	}
	got := ins[0]
	if got.Config.Labels["team"] != "e2e" || got.Config.Labels["io.pinfold.instance"] != id || got.Config.WorkingDir != "/vol" ||
		strings.Join(got.HostConfig.Binds, " ") != bindDir+":/data "+volume+":/vol /run/pinfold/instances/"+id+":/run/pinfold:ro" || !got.HostConfig.ReadonlyRootfs ||
		strings.Join(got.HostConfig.CapDrop, ",") != "NET_RAW" && strings.Join(got.HostConfig.CapDrop, ",") != "CAP_NET_RAW" ||
		got.HostConfig.RestartPolicy.Name != "on-failure" || got.HostConfig.RestartPolicy.MaximumRetryCount != 2 {
		t.Errorf("container %s = %+v; want every setting of the deploy", short(c), got)
	}
	if out, errOut, code := pinfold(t, "", "rebalance", "--planner", plannerAddr); code != 0 || !strings.Contains(out, id+" stays on vm: it has a host-local volume (bind "+bindDir+")") {
		t.Errorf("rebalance: exit %d, %s%s; want %s kept, saying why", code, out, errOut, id)
	}
	if _, errOut, code := pinfold(t, "", "remove", "vol", "--planner", plannerAddr); code != 0 {
		t.Fatalf("remove vol: %s", errOut)
	}
	eventually(t, 60*time.Second, "vol's container removed", func() (bool, string) {
		left := dockerPS(t, id)
		return len(left) == 0, strings.Join(left, " ")
	})
}
