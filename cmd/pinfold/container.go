package main

import (
	"strings"

	"github.com/spf13/cobra"

	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/wire/pinfoldv1"
)

// containerFlags are the container settings of deploy and replace:
// volumes, restart policy, labels, user, workdir, read-only root,
// capabilities and logging.
type containerFlags struct {
	volumes, labels, capAdd, capDrop, logOpts []string
	restart, user, workdir, logDriver         string
	readOnly                                  bool
}

// containerFlagNames are the flags containerFlags registers.
var containerFlagNames = []string{"volume", "restart", "label", "user", "workdir", "read-only", "cap-add", "cap-drop", "log-driver", "log-opt"}

func (c *containerFlags) register(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringArrayVar(&c.volumes, "volume", nil, "mount HOST_PATH:CTR_PATH[:ro] (bind) or NAME:CTR_PATH[:ro] (named volume; repeatable); either keeps the instance on its host through rebalance and drain")
	f.StringVar(&c.restart, "restart", "", "Docker restart policy: no, on-failure[:N], always or unless-stopped (default no)")
	f.StringArrayVar(&c.labels, "label", nil, "container label KEY=VALUE (repeatable; not io.pinfold.*)")
	f.StringVar(&c.user, "user", "", "run as NAME, UID, NAME:GROUP or UID:GID (default: the image's)")
	f.StringVar(&c.workdir, "workdir", "", "working directory in the container, absolute (default: the image's)")
	f.BoolVar(&c.readOnly, "read-only", false, "mount the container's root filesystem read-only")
	f.StringArrayVar(&c.capAdd, "cap-add", nil, "add a Linux capability, e.g. NET_ADMIN (CAP_ optional; ALL for all; repeatable)")
	f.StringArrayVar(&c.capDrop, "cap-drop", nil, "drop a Linux capability, e.g. ALL or CHOWN (repeatable)")
	f.StringVar(&c.logDriver, "log-driver", "", "Docker log driver, e.g. json-file, local, journald (default: the engine's)")
	f.StringArrayVar(&c.logOpts, "log-opt", nil, "log driver option KEY=VALUE, e.g. max-size=10m (repeatable)")
	_ = cmd.RegisterFlagCompletionFunc("restart", cobra.FixedCompletions([]string{"no", "on-failure", "always", "unless-stopped"}, cobra.ShellCompDirectiveNoFileComp))
	_ = cmd.RegisterFlagCompletionFunc("log-driver", cobra.FixedCompletions([]string{"json-file", "local", "journald", "syslog", "none"}, cobra.ShellCompDirectiveNoFileComp))
}

// given reports whether any container flag is on cmd's command line.
func (c *containerFlags) given(cmd *cobra.Command) bool {
	for _, n := range containerFlagNames {
		if cmd.Flags().Changed(n) {
			return true
		}
	}
	return false
}

// msg is the settings' wire form, checked here as the planner checks them
// (bad input, exit 2, before any call); nil when none is set.
func (c *containerFlags) msg() (*pinfoldv1.ContainerSpec, error) {
	labels, err := keyValues("--label", c.labels)
	if err != nil {
		return nil, err
	}
	opts, err := keyValues("--log-opt", c.logOpts)
	if err != nil {
		return nil, err
	}
	m := model.Container{Volumes: c.volumes, Restart: c.restart, Labels: labels, User: c.user, Workdir: c.workdir, ReadOnly: c.readOnly,
		CapAdd: c.capAdd, CapDrop: c.capDrop, LogDriver: c.logDriver, LogOpts: opts}
	if err := m.Validate(); err != nil {
		return nil, badInput("%v", err)
	}
	return pinfoldv1.NewContainerSpec(m), nil
}

// keyValues reads repeated KEY=VALUE flags (a key given twice: the last).
func keyValues(flag string, list []string) (map[string]string, error) {
	if len(list) == 0 {
		return nil, nil
	}
	out := make(map[string]string, len(list))
	for _, kv := range list {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, badInput("%s %q: want KEY=VALUE", flag, kv)
		}
		out[k] = v
	}
	return out, nil
}

// editFlags are replace's removals, each naming settings to drop; with
// containerFlags (each given one set, the others kept) they make an edit.
// Registered after containerFlags, they also say in its flags' help that
// a replace keeps what is not given.
type editFlags struct {
	volumes, labels, capAdd, capDrop, logOpts []string
}

func (e *editFlags) register(cmd *cobra.Command) {
	f := cmd.Flags()
	// A replace keeps what a flag does not name: no deploy's defaults.
	for name, usage := range map[string]string{
		"restart":    "set the Docker restart policy: no, on-failure[:N], always or unless-stopped (not given: kept)",
		"user":       `run as NAME, UID, NAME:GROUP or UID:GID ("": the image's; not given: kept)`,
		"workdir":    `working directory in the container, absolute ("": the image's; not given: kept)`,
		"read-only":  "mount the root filesystem read-only (--read-only=false: writable; not given: kept)",
		"log-driver": `Docker log driver, e.g. json-file, local, journald ("": the engine's; not given: kept)`,
		"volume":     "mount HOST_PATH:CTR_PATH[:ro] or NAME:CTR_PATH[:ro], replacing the one at CTR_PATH (repeatable; the others are kept)",
	} {
		if fl := f.Lookup(name); fl != nil {
			fl.Usage = usage
		}
	}
	f.StringArrayVar(&e.volumes, "volume-rm", nil, "unmount the volume at this container path (or SOURCE:TARGET; repeatable)")
	f.StringArrayVar(&e.labels, "label-rm", nil, "remove the label KEY (repeatable)")
	f.StringArrayVar(&e.capAdd, "cap-add-rm", nil, "take a capability out of the added ones (repeatable)")
	f.StringArrayVar(&e.capDrop, "cap-drop-rm", nil, "take a capability out of the dropped ones (repeatable)")
	f.StringArrayVar(&e.logOpts, "log-opt-rm", nil, "remove the log driver option KEY (repeatable)")
}

// edit is the edit cmd's container flags name, checked as the planner
// checks it (bad input, exit 2, before any call): each flag given sets
// its setting (--user "" too), each -rm flag removes; the rest is kept.
func (c *containerFlags) edit(cmd *cobra.Command, rm editFlags) (model.ContainerEdit, error) {
	labels, err := keyValues("--label", c.labels)
	if err != nil {
		return model.ContainerEdit{}, err
	}
	opts, err := keyValues("--log-opt", c.logOpts)
	if err != nil {
		return model.ContainerEdit{}, err
	}
	e := model.ContainerEdit{Volumes: c.volumes, VolumesRm: rm.volumes, Labels: labels, LabelsRm: rm.labels,
		CapAdd: c.capAdd, CapAddRm: rm.capAdd, CapDrop: c.capDrop, CapDropRm: rm.capDrop, LogOpts: opts, LogOptsRm: rm.logOpts}
	set := func(flag string, v *string) *string {
		if cmd.Flags().Changed(flag) {
			return v
		}
		return nil
	}
	e.Restart, e.User, e.Workdir, e.LogDriver = set("restart", &c.restart), set("user", &c.user), set("workdir", &c.workdir), set("log-driver", &c.logDriver)
	if cmd.Flags().Changed("read-only") {
		e.ReadOnly = &c.readOnly
	}
	if err := e.Validate(); err != nil {
		return model.ContainerEdit{}, badInput("%v", err)
	}
	return e, nil
}
