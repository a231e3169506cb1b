package model_test

import (
	"strings"
	"testing"

	"github.com/pinfold/pinfold/planner/model"
)

func TestParseVolume(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want model.Volume
		bind bool
		err  string // a part of the error; "" for none
	}{
		{in: "/srv/data:/data", want: model.Volume{Source: "/srv/data", Target: "/data"}, bind: true},
		{in: "/srv/data:/data:ro", want: model.Volume{Source: "/srv/data", Target: "/data", ReadOnly: true}, bind: true},
		{in: "/srv/data:/data:rw", want: model.Volume{Source: "/srv/data", Target: "/data"}, bind: true},
		{in: "cache:/cache", want: model.Volume{Source: "cache", Target: "/cache"}},
		{in: "my_vol.1-x:/v:ro", want: model.Volume{Source: "my_vol.1-x", Target: "/v", ReadOnly: true}},
		{in: "x:y", err: `volume "x:y": container path "y" is not absolute`},
		{in: "/data", err: `volume "/data": want SOURCE:TARGET[:ro]`},
		{in: "a:/b:ro:z", err: `volume "a:/b:ro:z": want SOURCE:TARGET[:ro]`},
		{in: ":/data", err: `volume ":/data": part 1 is empty`},
		{in: "/src:", err: `volume "/src:": part 2 is empty`},
		{in: "/src:/dst:", err: `volume "/src:/dst:": part 3 is empty`},
		{in: "/src:/dst:rx", err: `volume "/src:/dst:rx": option "rx": want ro or rw`},
		{in: "./data:/data", err: `volume "./data:/data": bind source "./data" is not absolute`},
		{in: "data/sub:/data", err: `bind source "data/sub" is not absolute`},
		{in: "~/data:/data", err: `bind source "~/data" is not absolute`},
		{in: "_vol:/data", err: `volume name "_vol"`},
		{in: "v@1:/data", err: `volume name "v@1"`},
		{in: "/src:/", err: `container path "/": not the container's root`},
		{in: "/s rc:/d", err: `part "/s rc": no blanks`},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := model.ParseVolume(tc.in)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("ParseVolume(%q) = %v, %v; want an error containing %q", tc.in, got, err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want || got.Bind() != tc.bind {
				t.Fatalf("ParseVolume(%q) = %+v (bind %v), %v; want %+v (bind %v)", tc.in, got, got.Bind(), err, tc.want, tc.bind)
			}
			if back, _ := model.ParseVolume(got.String()); back != got {
				t.Errorf("ParseVolume(%q.String() = %q) = %+v: not the same volume", tc.in, got.String(), back)
			}
		})
	}
}

func TestParseRestart(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in      string
		name    string
		retries int
		err     string
	}{
		{in: "", name: "no"},
		{in: "no", name: "no"},
		{in: "always", name: "always"},
		{in: "unless-stopped", name: "unless-stopped"},
		{in: "on-failure", name: "on-failure"},
		{in: "on-failure:5", name: "on-failure", retries: 5},
		{in: "on-failure:x", err: `restart "on-failure:x": retries "x"`},
		{in: "on-failure:-1", err: `restart "on-failure:-1": retries "-1"`},
		{in: "always:3", err: `restart "always:3": only on-failure takes a count`},
		{in: "sometimes", err: `restart "sometimes": want no, on-failure[:N], always or unless-stopped`},
	} {
		t.Run(tc.in, func(t *testing.T) {
			name, n, err := model.ParseRestart(tc.in)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("ParseRestart(%q) = %q, %d, %v; want an error containing %q", tc.in, name, n, err, tc.err)
				}
				return
			}
			if err != nil || name != tc.name || n != tc.retries {
				t.Fatalf("ParseRestart(%q) = %q, %d, %v; want %q, %d", tc.in, name, n, err, tc.name, tc.retries)
			}
		})
	}
}

func TestContainerValidate(t *testing.T) {
	t.Parallel()
	ok := model.Container{Volumes: []string{"/srv:/srv:ro", "data:/data"}, Restart: "on-failure:3", Labels: map[string]string{"team": "web", "empty": ""},
		User: "1000:1000", Workdir: "/app", ReadOnly: true, CapAdd: []string{"NET_ADMIN", "CAP_SYS_TIME"}, CapDrop: []string{"ALL"},
		LogDriver: "json-file", LogOpts: map[string]string{"max-size": "10m"}}
	for _, tc := range []struct {
		name string
		edit func(c *model.Container)
		err  string
	}{
		{name: "all good", edit: func(*model.Container) {}},
		{name: "empty", edit: func(c *model.Container) { *c = model.Container{} }},
		{name: "bad volume", edit: func(c *model.Container) { c.Volumes = []string{"x:y"} }, err: `volume "x:y": container path "y" is not absolute`},
		{name: "same target twice", edit: func(c *model.Container) { c.Volumes = []string{"a:/d", "/b:/d"} }, err: `volume "/b:/d": container path "/d" is already mounted by "a:/d"`},
		{name: "bad restart", edit: func(c *model.Container) { c.Restart = "never" }, err: `restart "never"`},
		{name: "reserved label", edit: func(c *model.Container) { c.Labels = map[string]string{"io.pinfold.service": "x"} }, err: `label key "io.pinfold.service": the prefix io.pinfold. is pinfold's own`},
		{name: "empty label key", edit: func(c *model.Container) { c.Labels = map[string]string{"": "v"} }, err: `label "=v": empty key`},
		{name: "label key with =", edit: func(c *model.Container) { c.Labels = map[string]string{"a=b": "v"} }, err: `label key "a=b"`},
		{name: "user with blank", edit: func(c *model.Container) { c.User = "a b" }, err: `user "a b"`},
		{name: "user with two colons", edit: func(c *model.Container) { c.User = "a:b:c" }, err: `user "a:b:c"`},
		{name: "relative workdir", edit: func(c *model.Container) { c.Workdir = "app" }, err: `workdir "app": not absolute`},
		{name: "lower-case cap", edit: func(c *model.Container) { c.CapAdd = []string{"net_admin"} }, err: `cap_add "net_admin": want a capability's name`},
		{name: "bare CAP_", edit: func(c *model.Container) { c.CapDrop = []string{"CAP_"} }, err: `cap_drop "CAP_"`},
		{name: "cap with dash", edit: func(c *model.Container) { c.CapDrop = []string{"SYS-ADMIN"} }, err: `cap_drop "SYS-ADMIN"`},
		{name: "bad log driver", edit: func(c *model.Container) { c.LogDriver = "json file" }, err: `log_driver "json file"`},
		{name: "bad log opt key", edit: func(c *model.Container) { c.LogOpts = map[string]string{"max size": "1"} }, err: `log_opt key "max size"`},
		{name: "log opt newline", edit: func(c *model.Container) { c.LogOpts = map[string]string{"tag": "a\nb"} }, err: `log_opt "tag": no newlines`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := ok
			tc.edit(&c)
			err := c.Validate()
			if tc.err == "" {
				if err != nil {
					t.Fatalf("Validate(%+v) = %v, want nil", c, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("Validate(%+v) = %v, want an error containing %q", c, err, tc.err)
			}
		})
	}
}

func TestCapability(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{"NET_ADMIN": "CAP_NET_ADMIN", "CAP_NET_ADMIN": "CAP_NET_ADMIN", "ALL": "ALL", "SYS_PTRACE2": "CAP_SYS_PTRACE2", "net_admin": "", "CAP_": "", "": "", "CAP_ALL": ""} {
		got, ok := model.Capability(in)
		if got != want || ok != (want != "") {
			t.Errorf("Capability(%q) = %q, %v; want %q, %v", in, got, ok, want, want != "")
		}
	}
}

func TestHostLocal(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		vols []string
		want string
	}{
		{nil, ""},
		{[]string{"/srv/data:/data"}, "bind /srv/data"},
		{[]string{"cache:/cache:ro", "/x:/x"}, "volume cache"},
	} {
		if got := (model.Container{Volumes: tc.vols}).HostLocal(); got != tc.want {
			t.Errorf("HostLocal(%q) = %q, want %q", tc.vols, got, tc.want)
		}
	}
}
