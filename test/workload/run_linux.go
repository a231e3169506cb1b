//go:build linux

package workload

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Seen is what a load saw from inside its instance, written to its report
// file every 200 ms (one line, "key=value" fields).
type Seen struct {
	GOMAXPROCS    int // now
	MinGOMAXPROCS int // the least seen since start
	AffMain       int // CPUs in the main thread's affinity
	AffNew        int // CPUs in a thread started just now
	SubCG         string
}

func (s Seen) String() string {
	sub := s.SubCG
	if sub == "" {
		sub = "-"
	}
	return fmt.Sprintf("gomaxprocs=%d min_gomaxprocs=%d aff_main=%d aff_new=%d subcg=%s",
		s.GOMAXPROCS, s.MinGOMAXPROCS, s.AffMain, s.AffNew, strings.ReplaceAll(sub, " ", "_"))
}

// ParseSeen reads a report line.
func ParseSeen(line string) (Seen, error) {
	var s Seen
	_, err := fmt.Sscanf(strings.TrimSpace(line), "gomaxprocs=%d min_gomaxprocs=%d aff_main=%d aff_new=%d subcg=%s",
		&s.GOMAXPROCS, &s.MinGOMAXPROCS, &s.AffMain, &s.AffNew, &s.SubCG)
	return s, err
}

// Affinity is the number of CPUs in tid's affinity (0: the calling thread).
func Affinity(tid int) int {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(tid, &set); err != nil {
		return -1
	}
	return set.Count()
}

// Run runs l in this process for ever, writing what it sees to report
// (when not empty). exe is the program to start for forks (this binary,
// started with env burnEnv set to "burn:MS").
func Run(l Load, report, exe, burnEnv string) {
	var sub atomic.Value
	sub.Store("")
	if report != "" {
		go reporter(report, &sub)
	}
	switch l.Kind {
	case Idle:
		select {}
	case Spin:
		for range l.N - 1 {
			go spinThread()
		}
		spinThread()
	case Go:
		for range l.N - 1 {
			go spinGoroutine()
		}
		spinGoroutine()
	case Bursty:
		for i := range l.N - 1 {
			go burstThread(l.On, l.Off, i)
		}
		burstThread(l.On, l.Off, l.N-1)
	case Pool:
		work := make(chan int)
		for range l.N {
			go func() {
				for range work {
					burnGo(time.Millisecond)
				}
			}()
		}
		for i := 0; ; i++ {
			work <- i
		}
	case Forks:
		for range l.N - 1 {
			go forkLoop(exe, burnEnv, l.On)
		}
		forkLoop(exe, burnEnv, l.On)
	case SubCG:
		sub.Store(ownSubCgroup())
		for range l.N - 1 {
			go spinThread()
		}
		spinThread()
	}
}

// Burn uses ms of CPU time and returns (a short-lived process's body).
func Burn(ms int) { burnThread(time.Duration(ms) * time.Millisecond) }

func reporter(path string, sub *atomic.Value) {
	minP := runtime.GOMAXPROCS(0)
	for {
		p := runtime.GOMAXPROCS(0)
		minP = min(minP, p)
		newAff := make(chan int)
		go func() {
			// A locked goroutine that exits locked ends its thread: the
			// next one is a thread started now, by whichever thread the
			// runtime asks.
			runtime.LockOSThread()
			newAff <- Affinity(0)
		}()
		s := Seen{GOMAXPROCS: p, MinGOMAXPROCS: minP, AffMain: Affinity(os.Getpid()), AffNew: <-newAff, SubCG: sub.Load().(string)}
		tmp := path + ".tmp"
		if os.WriteFile(tmp, []byte(s.String()+"\n"), 0o644) == nil {
			os.Rename(tmp, path)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func spinThread() {
	runtime.LockOSThread()
	for x := 0; ; x++ {
		_ = x
	}
}

func spinGoroutine() {
	for x := 0; ; x++ {
		_ = x
	}
}

// threadCPU is the calling thread's CPU time.
func threadCPU() time.Duration {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts)
	return time.Duration(ts.Nano())
}

// burnThread uses d of this thread's CPU time.
func burnThread(d time.Duration) {
	end := threadCPU() + d
	for threadCPU() < end {
		for x := 0; x < 2000; x++ {
			_ = x
		}
	}
}

// burnGo uses about d of CPU in a goroutine that may change threads: the
// process's CPU time is not the goroutine's, so it counts loop iterations
// calibrated once.
func burnGo(d time.Duration) {
	n := int(float64(itersPerMs()) * float64(d) / float64(time.Millisecond))
	x := 0
	for i := 0; i < n; i++ {
		x += i
	}
	sink.Store(int64(x))
}

var sink atomic.Int64

// itersPerMs is calibrated once, on first use (the pool load alone needs
// it): not at start-up of every binary that imports the package, which
// would add CPU to each short-lived process of a forks load and each probe.
var itersPerMs = sync.OnceValue(func() int64 {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	start := threadCPU()
	x := 0
	const n = 5_000_000
	for i := 0; i < n; i++ {
		x += i
	}
	sink.Store(int64(x))
	if el := threadCPU() - start; el > 0 {
		return int64(float64(n) * float64(time.Millisecond) / float64(el))
	}
	return 1_000_000
})

// burstThread: ON ms of CPU work, then OFF ms asleep, for ever, on one OS
// thread; the first sleep is staggered by i so threads do not start in step.
func burstThread(on, off, i int) {
	runtime.LockOSThread()
	time.Sleep(time.Duration(i%(on+off)) * time.Millisecond)
	for {
		burnThread(time.Duration(on) * time.Millisecond)
		ts := unix.NsecToTimespec(int64(off) * int64(time.Millisecond))
		unix.Nanosleep(&ts, nil)
	}
}

func forkLoop(exe, env string, ms int) {
	for {
		cmd := exec.Command(exe, "-test.run=^$")
		cmd.Env = append(withoutGOMAXPROCS(os.Environ()), fmt.Sprintf("%s=burn:%d", env, ms))
		if err := cmd.Run(); err != nil {
			time.Sleep(10 * time.Millisecond)
		}
	}
}

func withoutGOMAXPROCS(env []string) []string {
	var out []string
	for _, e := range env {
		if !strings.HasPrefix(e, "GOMAXPROCS=") && !strings.HasPrefix(e, "GODEBUG=") {
			out = append(out, e)
		}
	}
	return out
}

// ownSubCgroup does what systemd or Docker-in-Docker does in a container:
// a child cgroup "inner" of its own, itself moved there, the cpu and
// cpuset controllers enabled for it. It returns "ok" or what failed.
func ownSubCgroup() string {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "read_/proc/self/cgroup: " + err.Error()
	}
	rel := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(string(b)), "0::"))
	dir := filepath.Join("/sys/fs/cgroup", rel)
	inner := filepath.Join(dir, "inner")
	if err := os.Mkdir(inner, 0o755); err != nil && !os.IsExist(err) {
		return "mkdir: " + err.Error()
	}
	if err := os.WriteFile(filepath.Join(inner, "cgroup.procs"), []byte("0"), 0o644); err != nil {
		return "move: " + err.Error()
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte("+cpu +cpuset"), 0o644); err != nil {
		return "subtree_control: " + err.Error()
	}
	return "ok"
}
