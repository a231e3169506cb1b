package nodeagent

import (
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestProcStatsKeepsFilesOpen: a thread's stat file stays open between
// reads; a thread that exits reads as gone and its file is closed; a file
// not read for procStatIdle is closed. Against this process's own /proc.
func TestProcStatsKeepsFilesOpen(t *testing.T) {
	clock := time.Unix(1000, 0)
	c := &procStats{root: "/proc", open: map[int]*procStat{}, now: func() time.Time { return clock }}
	runtime.LockOSThread() // else the other goroutine may take this thread
	defer runtime.UnlockOSThread()
	self := unix.Gettid()
	// other: a thread that ends when its goroutine does (locked, never
	// unlocked), not the process's main thread, which the runtime keeps.
	exited := make(chan int)
	stop := make(chan struct{})
	other := unix.Getpid()
	for other == unix.Getpid() {
		go func() {
			runtime.LockOSThread()
			exited <- unix.Gettid()
			<-stop
		}()
		other = <-exited
	}
	for _, tid := range []int{self, other} {
		if _, ok := c.state(tid); !ok {
			t.Fatalf("thread %d: not read", tid)
		}
	}
	if len(c.open) != 2 {
		t.Fatalf("%d files open after reading 2 threads, want 2", len(c.open))
	}
	fd := c.open[self].fd
	if _, ok := c.state(self); !ok || c.open[self].fd != fd {
		t.Fatalf("thread %d read again: ok %v, file %d, want the same file %d", self, ok, c.open[self].fd, fd)
	}
	close(stop)
	gone := false
	for range 200 {
		if _, ok := c.state(other); !ok {
			gone = true
			break
		}
		time.Sleep(5 * time.Millisecond) // the thread's exit is the kernel's, not ours to wait on
	}
	if !gone {
		t.Fatalf("thread %d exited but still reads", other)
	}
	if _, held := c.open[other]; held {
		t.Errorf("the file of exited thread %d is still open", other)
	}
	clock = clock.Add(procStatIdle)
	c.prune(clock)
	if _, held := c.open[self]; held {
		t.Errorf("thread %d's file not read for %s is still open", self, procStatIdle)
	}
	if _, ok := c.state(self); !ok || c.open[self] == nil {
		t.Errorf("thread %d not read and held again after its file was closed", self)
	}
	c.close(self)
}
