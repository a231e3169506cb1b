package nodeagent

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/pinfold/pinfold/planner/model"
)

// sizeFiles keeps each instance's size file under Config.ResourcesDir:
// <dir>/<instance ID>/resources.json, the directory bind-mounted read-only
// at SizeMount in the instance's containers (a directory, not the file: a
// rename inside it is seen through the mount; a file's bind mount keeps
// the old inode). Written only when the content changes.
type sizeFiles struct {
	dir     string
	written map[string][]byte // by instance ID: the content last written (nil: a directory found at start)
	// applied is, by instance ID, the size last written as the one its
	// containers have (not a notice), or read back at start: what a
	// shrink is measured against (the planner's wire form carries no
	// previous size).
	applied map[string]Size
	notice  map[string]notice // by instance ID: a shrink announced
}

// notice is a shrink announced to an instance: its generation, and when
// the resize may be applied.
type notice struct {
	gen int64
	due time.Time
}

func newSizeFiles(dir string) *sizeFiles {
	return &sizeFiles{dir: dir, notice: map[string]notice{}, applied: map[string]Size{}}
}

// bind is the mount of in's directory, Docker's SOURCE:TARGET:ro.
func (s *sizeFiles) bind(id string) string {
	return filepath.Join(s.dir, id) + ":" + SizeMount + ":ro"
}

// write makes id's file hold content: written to a temporary file in the
// same directory, then renamed over it. Nothing is written when the
// content is what was written last.
func (s *sizeFiles) write(id string, content []byte) error {
	if err := sizeDirName(id); err != nil {
		return err
	}
	if s.written == nil {
		s.load()
	}
	if old, ok := s.written[id]; ok && bytes.Equal(old, content) {
		return nil
	}
	// Readable by every user a container runs as, whatever the agent's
	// umask (the packaged unit's is 0077). Never through a link someone
	// planted: the directory must be one (not a link to one), the
	// temporary file is made anew (O_EXCL, O_NOFOLLOW), and the rename
	// replaces whatever resources.json was without following it.
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		return fmt.Errorf("resources file of %s: %w", id, err)
	}
	d := filepath.Join(s.dir, id)
	if err := os.Mkdir(d, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("resources file of %s: %w", id, err)
	}
	if fi, err := os.Lstat(d); err != nil || !fi.IsDir() {
		return fmt.Errorf("resources file of %s: %s is not a directory (a link or a file is never written through)", id, d)
	}
	if err := os.Chmod(d, 0o755); err != nil {
		return fmt.Errorf("resources file of %s: %w", id, err)
	}
	tmp := filepath.Join(d, "."+SizeFile+".tmp")
	os.Remove(tmp) // a link or a file a crash left: removed, not followed
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o644)
	if err != nil {
		return fmt.Errorf("resources file of %s: %w", id, err)
	}
	_, werr := f.Write(content)
	cherr := f.Chmod(0o644)
	if cerr := f.Close(); werr == nil {
		werr = cmp.Or(cherr, cerr)
	}
	if werr != nil {
		os.Remove(tmp)
		return fmt.Errorf("resources file of %s: %w", id, werr)
	}
	if err := os.Rename(tmp, filepath.Join(d, SizeFile)); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("resources file of %s: %w", id, err)
	}
	s.written[id] = bytes.Clone(content)
	return nil
}

// ensure writes sz as id's size unless this run wrote its file already.
func (s *sizeFiles) ensure(id string, sz Size) error {
	if s.written == nil {
		s.load()
	}
	if s.written[id] != nil {
		return nil
	}
	return s.writeSize(id, sz)
}

// writeSize writes sz as the size id's containers have.
func (s *sizeFiles) writeSize(id string, sz Size) error {
	if err := s.write(id, sz.JSON()); err != nil {
		return err
	}
	s.applied[id] = sz
	return nil
}

// load lists the directories a previous run left, so that those of
// instances gone meanwhile are removed (prune), and reads back the size
// each file says its containers have (a notice's current size).
func (s *sizeFiles) load() {
	s.written = map[string][]byte{}
	es, _ := os.ReadDir(s.dir)
	for _, e := range es {
		if !e.IsDir() || sizeDirName(e.Name()) != nil {
			continue
		}
		s.written[e.Name()] = nil
		if _, ok := s.applied[e.Name()]; ok {
			continue
		}
		b, err := readSmall(filepath.Join(s.dir, e.Name(), SizeFile), 1<<16)
		var sz Size
		if err == nil && json.Unmarshal(b, &sz) == nil && sz.Instance == e.Name() {
			sz.Next = nil
			s.applied[e.Name()] = sz
		}
	}
}

// readSmall reads a regular file of at most max bytes, never following a
// link nor blocking on a FIFO or a device someone put in its place.
func readSmall(name string, max int64) ([]byte, error) {
	f, err := os.OpenFile(name, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() || fi.Size() > max {
		return nil, fmt.Errorf("%s: not a regular file of at most %d bytes", name, max)
	}
	return io.ReadAll(io.LimitReader(f, max))
}

// prune removes the directories of instances neither desired nor holding
// a container (keep): only what the agent writes there (resources.json
// and its temporary file), then the directory if that left it empty. A
// directory holding anything else (--resources-dir pointed at a
// directory of other data) is left as it is.
func (s *sizeFiles) prune(keep map[string]bool) error {
	if s.written == nil {
		s.load()
	}
	var errs []error
	for id := range s.written {
		if keep[id] {
			continue
		}
		d := filepath.Join(s.dir, id)
		if fi, err := os.Lstat(d); err == nil && fi.IsDir() {
			os.Remove(filepath.Join(d, SizeFile))
			os.Remove(filepath.Join(d, "."+SizeFile+".tmp"))
			if err := os.Remove(d); err != nil && !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ENOTEMPTY) && !errors.Is(err, syscall.EEXIST) {
				errs = append(errs, fmt.Errorf("resources file of %s: %w", id, err))
				continue
			}
		}
		delete(s.written, id)
		delete(s.notice, id)
		delete(s.applied, id)
	}
	return errors.Join(errs...)
}

// hold decides whether in's resize waits for its notice: when every > 0
// and the resize shrinks in from the size last applied, the first call
// announces it (writes the notice) and every call until the notice has
// passed says to wait, with how long is left; announced says the notice
// was written by this call.
func (s *sizeFiles) hold(in model.Instance, shareBase int, every time.Duration, now time.Time) (left time.Duration, announced bool, err error) {
	if every <= 0 {
		return 0, false, nil
	}
	if s.written == nil {
		s.load()
	}
	was, ok := s.applied[in.ID]
	next := SizeOf(in, shareBase)
	if !ok || !Shrinks(was, next) {
		return 0, false, nil
	}
	n, ok := s.notice[in.ID]
	if !ok || n.gen != in.Generation {
		n = notice{gen: in.Generation, due: now.Add(every)}
		ann := Notice(was, next)
		ann.NextAt = n.due.UTC().Format(time.RFC3339)
		if err := s.write(in.ID, ann.JSON()); err != nil {
			return 0, false, err
		}
		s.notice[in.ID] = n
		announced = true
	}
	return max(0, n.due.Sub(now)), announced, nil
}

// refresh makes the file of every desired instance hold its size, except
// those in skip (an action on it failed or waits: the file keeps what the
// container has, or the notice), and removes the directories of
// instances neither desired nor in a container (seen).
func (s *sizeFiles) refresh(desired []model.Instance, seen map[string]bool, skip map[string]bool, shareBase int) error {
	var errs []error
	keep := map[string]bool{}
	for id := range seen {
		keep[id] = true
	}
	for _, in := range desired {
		keep[in.ID] = true
		if skip[in.ID] {
			continue
		}
		if err := s.writeSize(in.ID, SizeOf(in, shareBase)); err != nil {
			errs = append(errs, err)
		}
	}
	if err := s.prune(keep); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// shareBase is the host's pieces to a CPU, as the planner last sent it.
func (a *Agent) shareBase() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.host.ShareBase
}

// volumeTarget is a volume's TARGET (Docker's SOURCE:TARGET[:ro|rw]),
// cleaned ("/run//pinfold/." is /run/pinfold).
func volumeTarget(v string) string {
	parts := strings.Split(v, ":")
	if len(parts) < 2 || parts[1] == "" {
		return ""
	}
	return path.Clean(parts[1])
}

// mountsSizeDir reports whether a volume's target is the size mount or
// lies in it: Docker refuses two mounts on one target, and one inside the
// read-only size mount cannot make its mount point.
func mountsSizeDir(v string) bool {
	t := volumeTarget(v)
	return t == SizeMount || strings.HasPrefix(t, SizeMount+"/")
}
