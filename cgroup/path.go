package cgroup

import (
	"fmt"
	"regexp"
	"strings"
)

// Path is a validated cgroup path relative to the cgroup2 mount point, such as
// "pinfold/web-1" or "docker/3f2a…": clean, relative, at most 32 segments of
// at most 255 bytes, each of letters, digits and "_.:@-", never "." or "..",
// and never the name of an interface file ("cgroup.procs", "cpu.max", …).
type Path struct{ p string }

var segmentRE = regexp.MustCompile(`^[A-Za-z0-9_:@-][A-Za-z0-9_.:@-]*$`)

// interfacePrefixes are the controller file prefixes a group name must not use.
var interfacePrefixes = []string{"cgroup.", "cpu.", "cpuset.", "memory.", "io.", "pids.", "rdma.", "hugetlb.", "misc."}

// ParsePath validates s ("" is the root of the mount).
func ParsePath(s string) (Path, error) {
	if s == "" {
		return Path{}, nil
	}
	if len(s) > 4096 {
		return Path{}, fmt.Errorf("cgroup: path %.40q…: longer than 4096 bytes", s)
	}
	segs := strings.Split(s, "/")
	if len(segs) > 32 {
		return Path{}, fmt.Errorf("cgroup: path %q: more than 32 segments", s)
	}
	for _, seg := range segs {
		if err := checkName(seg); err != nil {
			return Path{}, fmt.Errorf("cgroup: path %q: %w", s, err)
		}
	}
	return Path{p: s}, nil
}

func checkName(seg string) error {
	switch {
	case seg == "":
		return fmt.Errorf("empty segment (leading, trailing or double slash)")
	case seg == "." || seg == "..":
		return fmt.Errorf("segment %q is not allowed", seg)
	case len(seg) > 255:
		return fmt.Errorf("segment longer than 255 bytes")
	case !segmentRE.MatchString(seg):
		return fmt.Errorf("segment %q: use letters, digits and _.:@- only", seg)
	}
	for _, pre := range interfacePrefixes {
		if strings.HasPrefix(seg, pre) {
			return fmt.Errorf("segment %q looks like an interface file", seg)
		}
	}
	return nil
}

// MustParsePath is for tests and constants.
func MustParsePath(s string) Path {
	p, err := ParsePath(s)
	if err != nil {
		panic(err)
	}
	return p
}

// String is the relative path ("" for the root).
func (p Path) String() string { return p.p }

// IsRoot reports whether p is the mount's root.
func (p Path) IsRoot() bool { return p.p == "" }

// Child returns p/name after validating name as one segment.
func (p Path) Child(name string) (Path, error) {
	if err := checkName(name); err != nil {
		return Path{}, fmt.Errorf("cgroup: group name %q: %w", name, err)
	}
	if p.p == "" {
		return Path{p: name}, nil
	}
	return ParsePath(p.p + "/" + name)
}

// Within reports whether p is parent or below it.
func (p Path) Within(parent Path) bool {
	return parent.p == "" || p.p == parent.p || strings.HasPrefix(p.p, parent.p+"/")
}

// file is the name of an interface file of p, relative to the mount.
func (p Path) file(name string) string {
	if p.p == "" {
		return name
	}
	return p.p + "/" + name
}

// ancestors returns "", then each prefix of p, ending with p itself.
func (p Path) ancestors() []Path {
	out := []Path{{}}
	if p.p == "" {
		return out
	}
	segs := strings.Split(p.p, "/")
	for i := range segs {
		out = append(out, Path{p: strings.Join(segs[:i+1], "/")})
	}
	return out
}
