package api

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/pinfold/pinfold/planner/clip"
	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/service"
)

// bound is the most one request field may carry.
type bound struct {
	bytes int // a string or bytes field; in a list or map, each entry (and key)
	count int // a list or map: the most entries
}

// requestBounds is the bound of every string, bytes, list and map field of
// every request message, by the field's full name (a nested message's
// fields, like HealthCheck's, once for every request that holds one). The
// numbers are the service's (service.Max…, with why each is what it is);
// TestEveryRequestFieldIsBounded fails when a field is missing here.
var requestBounds = map[protoreflect.FullName]bound{
	"pinfold.v1.RegisterHostRequest.name":          {bytes: service.MaxNameLen},
	"pinfold.v1.RegisterHostRequest.topology_json": {bytes: service.MaxTopologyBytes},
	"pinfold.v1.RegisterHostRequest.reserved_cpus": {bytes: service.MaxCPUListLen},
	"pinfold.v1.RegisterHostRequest.agent_version": {bytes: service.MaxAgentVersionLen},
	"pinfold.v1.RegisterHostRequest.no_agent":      {bytes: service.MaxNoAgentLen},

	"pinfold.v1.GetHostRequest.name":                     {bytes: service.MaxNameLen},
	"pinfold.v1.SetHostRequest.name":                     {bytes: service.MaxNameLen},
	"pinfold.v1.SetHostRequest.add_cpus":                 {count: service.MaxCPUEntries},
	"pinfold.v1.SetHostRequest.remove_cpus":              {bytes: service.MaxCPUListLen},
	"pinfold.v1.SetHostRequest.numa_memory_bytes":        {count: service.MaxCPUEntries},
	"pinfold.v1.SetHostRequest.set_properties":           {bytes: service.MaxPropertyLen, count: service.MaxProperties},
	"pinfold.v1.SetHostRequest.remove_properties":        {bytes: service.MaxPropertyLen, count: service.MaxProperties},
	"pinfold.v1.SetHostRequest.fault_domain":             {bytes: service.MaxNameLen},
	"pinfold.v1.SetHostRequest.upgrade_domain":           {bytes: service.MaxNameLen},
	"pinfold.v1.SetHostRequest.host_type":                {bytes: service.MaxHostTypeLen},
	"pinfold.v1.SetHostEnabledRequest.name":              {bytes: service.MaxNameLen},
	"pinfold.v1.RemoveHostRequest.name":                  {bytes: service.MaxNameLen},
	"pinfold.v1.DrainHostRequest.name":                   {bytes: service.MaxNameLen},
	"pinfold.v1.SetHostMaintenanceRequest.name":          {bytes: service.MaxNameLen},
	"pinfold.v1.PlacementSettings.buffer_percent":        {bytes: service.MaxWordLen, count: service.MaxSettingsEntries},
	"pinfold.v1.PlacementSettings.overbooking_percent":   {bytes: service.MaxWordLen, count: service.MaxSettingsEntries},
	"pinfold.v1.PlacementSettings.constraint_priorities": {bytes: service.MaxWordLen, count: service.MaxSettingsEntries},

	"pinfold.v1.DeployRequest.service":            {bytes: service.MaxNameLen},
	"pinfold.v1.DeployRequest.image":              {bytes: service.MaxImageLen},
	"pinfold.v1.DeployRequest.command":            {bytes: service.MaxCommandEnvBytes, count: service.MaxCommandEnvEntries},
	"pinfold.v1.DeployRequest.env":                {bytes: service.MaxCommandEnvBytes, count: service.MaxCommandEnvEntries},
	"pinfold.v1.DeployRequest.cpu":                {bytes: service.MaxWordLen},
	"pinfold.v1.DeployRequest.source":             {bytes: model.MaxSourceLength},
	"pinfold.v1.DeployRequest.strategy":           {bytes: service.MaxWordLen},
	"pinfold.v1.DeployRequest.constraint":         {bytes: service.MaxConstraintLen},
	"pinfold.v1.DeployRequest.affinity_hard":      {bytes: service.MaxNameLen, count: service.MaxRuleServices},
	"pinfold.v1.DeployRequest.affinity_soft":      {bytes: service.MaxNameLen, count: service.MaxRuleServices},
	"pinfold.v1.DeployRequest.anti_affinity_hard": {bytes: service.MaxNameLen, count: service.MaxRuleServices},
	"pinfold.v1.DeployRequest.anti_affinity_soft": {bytes: service.MaxNameLen, count: service.MaxRuleServices},
	"pinfold.v1.DeployRequest.placement_policy":   {bytes: service.MaxWordLen},
	"pinfold.v1.DeployRequest.hosts_order":        {bytes: service.MaxNameLen, count: service.MaxHostsListed},
	"pinfold.v1.DeployRequest.domain_spread":      {bytes: service.MaxWordLen},
	"pinfold.v1.DeployRequest.network":            {bytes: service.MaxNameLen},
	"pinfold.v1.HealthCheck.exec":                 {bytes: service.MaxCommandEnvBytes, count: service.MaxCommandEnvEntries},
	"pinfold.v1.HealthCheck.http":                 {bytes: service.MaxHealthHTTPLen},
	"pinfold.v1.HealthCheck.timeout":              {bytes: service.MaxWordLen},
	"pinfold.v1.HealthCheck.port":                 {bytes: service.MaxWordLen},
	"pinfold.v1.DeployRequest.ports":              {count: model.MaxPorts},

	"pinfold.v1.ResizeRequest.target":            {bytes: service.MaxNameLen},
	"pinfold.v1.ResizeRequest.cpu_delta":         {bytes: service.MaxWordLen},
	"pinfold.v1.ResizeRequest.expect_cpu":        {bytes: service.MaxWordLen},
	"pinfold.v1.ResizeRequest.to_cpu":            {bytes: service.MaxWordLen},
	"pinfold.v1.ReplaceRequest.target":           {bytes: service.MaxNameLen},
	"pinfold.v1.ReplaceRequest.image":            {bytes: service.MaxImageLen},
	"pinfold.v1.ReplaceRequest.command":          {bytes: service.MaxCommandEnvBytes, count: service.MaxCommandEnvEntries},
	"pinfold.v1.ReplaceRequest.hosts":            {bytes: service.MaxNameLen, count: service.MaxHostsListed},
	"pinfold.v1.ReplaceRequest.pull":             {bytes: service.MaxWordLen},
	"pinfold.v1.RemoveRequest.target":            {bytes: service.MaxNameLen},
	"pinfold.v1.ListInstancesRequest.host":       {bytes: service.MaxNameLen},
	"pinfold.v1.ListInstancesRequest.service":    {bytes: service.MaxNameLen},
	"pinfold.v1.ListInstancesRequest.page_token": {bytes: service.MaxPageTokenLen},
	"pinfold.v1.ListHostsRequest.page_token":     {bytes: service.MaxPageTokenLen},
	"pinfold.v1.ScaleRequest.service":            {bytes: service.MaxNameLen},
	"pinfold.v1.GetServiceRequest.name":          {bytes: service.MaxNameLen},

	"pinfold.v1.CapacityRequest.cpu":                {bytes: service.MaxWordLen},
	"pinfold.v1.CapacityRequest.service":            {bytes: service.MaxNameLen},
	"pinfold.v1.CapacityRequest.constraint":         {bytes: service.MaxConstraintLen},
	"pinfold.v1.CapacityRequest.affinity_hard":      {bytes: service.MaxNameLen, count: service.MaxRuleServices},
	"pinfold.v1.CapacityRequest.anti_affinity_hard": {bytes: service.MaxNameLen, count: service.MaxRuleServices},

	"pinfold.v1.ListEventsRequest.service": {bytes: service.MaxNameLen},
	"pinfold.v1.ListEventsRequest.host":    {bytes: service.MaxNameLen},
	"pinfold.v1.ListEventsRequest.after":   {bytes: service.MaxWordLen},

	"pinfold.v1.HeartbeatRequest.host":            {bytes: service.MaxNameLen},
	"pinfold.v1.HeartbeatRequest.agent_version":   {bytes: service.MaxAgentVersionLen},
	"pinfold.v1.ReportStatusRequest.host":         {bytes: service.MaxNameLen},
	"pinfold.v1.ReportStatusRequest.id":           {bytes: service.MaxNameLen},
	"pinfold.v1.ReportStatusRequest.state":        {bytes: service.MaxWordLen},
	"pinfold.v1.ReportStatusRequest.container_id": {bytes: 128},
	"pinfold.v1.ReportStatusRequest.error":        {bytes: model.MaxStatusErrorLen},
	"pinfold.v1.Applied.cpus":                     {bytes: service.MaxAppliedListLen},
	"pinfold.v1.Applied.mems":                     {bytes: service.MaxAppliedListLen},
	"pinfold.v1.WatchInstancesRequest.host":       {bytes: service.MaxNameLen},
	"pinfold.v1.ContainerSpec.volumes":            {bytes: model.MaxFieldLen, count: model.MaxVolumes},
	"pinfold.v1.ContainerSpec.restart":            {bytes: service.MaxWordLen},
	"pinfold.v1.ContainerSpec.labels":             {bytes: model.MaxLabelBytes, count: model.MaxLabels},
	"pinfold.v1.ContainerSpec.user":               {bytes: 256},
	"pinfold.v1.ContainerSpec.workdir":            {bytes: model.MaxFieldLen},
	"pinfold.v1.ContainerSpec.cap_add":            {bytes: service.MaxWordLen, count: model.MaxCaps},
	"pinfold.v1.ContainerSpec.cap_drop":           {bytes: service.MaxWordLen, count: model.MaxCaps},
	"pinfold.v1.ContainerSpec.log_driver":         {bytes: service.MaxNameLen},
	"pinfold.v1.ContainerSpec.log_opts":           {bytes: model.MaxFieldLen, count: model.MaxLogOpts},
	"pinfold.v1.ContainerEdit.volumes":            {bytes: model.MaxFieldLen, count: model.MaxVolumes},
	"pinfold.v1.ContainerEdit.volumes_rm":         {bytes: model.MaxFieldLen, count: model.MaxVolumes},
	"pinfold.v1.ContainerEdit.restart":            {bytes: service.MaxWordLen},
	"pinfold.v1.ContainerEdit.labels":             {bytes: model.MaxLabelBytes, count: model.MaxLabels},
	"pinfold.v1.ContainerEdit.labels_rm":          {bytes: model.MaxFieldLen, count: model.MaxLabels},
	"pinfold.v1.ContainerEdit.user":               {bytes: 256},
	"pinfold.v1.ContainerEdit.workdir":            {bytes: model.MaxFieldLen},
	"pinfold.v1.ContainerEdit.cap_add":            {bytes: service.MaxWordLen, count: model.MaxCaps},
	"pinfold.v1.ContainerEdit.cap_add_rm":         {bytes: service.MaxWordLen, count: model.MaxCaps},
	"pinfold.v1.ContainerEdit.cap_drop":           {bytes: service.MaxWordLen, count: model.MaxCaps},
	"pinfold.v1.ContainerEdit.cap_drop_rm":        {bytes: service.MaxWordLen, count: model.MaxCaps},
	"pinfold.v1.ContainerEdit.log_driver":         {bytes: service.MaxNameLen},
	"pinfold.v1.ContainerEdit.log_opts":           {bytes: model.MaxFieldLen, count: model.MaxLogOpts},
	"pinfold.v1.ContainerEdit.log_opts_rm":        {bytes: model.MaxFieldLen, count: model.MaxLogOpts},
}

// checkBounds refuses a request with a field over its bound (or, for a
// field missing from requestBounds, over MaxNameLen), naming the field,
// the clipped value and the bound.
func checkBounds(m proto.Message) error {
	if err := checkMessage(m.ProtoReflect(), ""); err != nil {
		return connect.NewError(connect.CodeInvalidArgument, err)
	}
	return nil
}

func checkMessage(r protoreflect.Message, prefix string) error {
	var err error
	r.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		err = checkField(fd, v, prefix+string(fd.Name()))
		return err == nil
	})
	return err
}

func checkField(fd protoreflect.FieldDescriptor, v protoreflect.Value, name string) error {
	b, ok := requestBounds[fd.FullName()]
	if !ok {
		b = bound{bytes: service.MaxNameLen, count: service.MaxNameLen}
	}
	switch {
	case fd.IsList():
		l := v.List()
		if l.Len() > b.count {
			return fmt.Errorf("%s: %d entries, want at most %d", name, l.Len(), b.count)
		}
		for i := range l.Len() {
			if err := checkValue(fd, l.Get(i), b, fmt.Sprintf("%s[%d]", name, i)); err != nil {
				return err
			}
		}
	case fd.IsMap():
		mp := v.Map()
		if mp.Len() > b.count {
			return fmt.Errorf("%s: %d entries, want at most %d", name, mp.Len(), b.count)
		}
		var keys []protoreflect.MapKey
		mp.Range(func(k protoreflect.MapKey, _ protoreflect.Value) bool { keys = append(keys, k); return true })
		slices.SortFunc(keys, func(a, b protoreflect.MapKey) int { return strings.Compare(a.String(), b.String()) })
		for _, k := range keys {
			kn := fmt.Sprintf("%s[%v]", name, clip.Text(k.String(), 40))
			if err := checkValue(fd.MapKey(), k.Value(), b, kn+" (key)"); err != nil {
				return err
			}
			if err := checkValue(fd.MapValue(), mp.Get(k), b, kn); err != nil {
				return err
			}
		}
	default:
		return checkValue(fd, v, b, name)
	}
	return nil
}

// checkValue checks one value (a field's, a list entry's, a map key's or
// value's) of fd's kind.
func checkValue(fd protoreflect.FieldDescriptor, v protoreflect.Value, b bound, name string) error {
	switch fd.Kind() {
	case protoreflect.StringKind:
		if s := v.String(); len(s) > b.bytes {
			shown := s
			switch {
			case fd.Name() == "env":
				shown = service.EnvName(s) // never a value in an error
			case strings.Contains(name, "log_opts[") || strings.Contains(name, "labels[") || strings.Contains(name, "exec"):
				// May be a secret (redact.go): an error is recorded in the
				// event log, which viewers read.
				return fmt.Errorf("%s: %d bytes, want at most %d bytes", name, len(s), b.bytes)
			}
			return fmt.Errorf("%s = %q: %d bytes, want at most %d bytes", name, clip.Text(shown, 100), len(s), b.bytes)
		}
	case protoreflect.BytesKind:
		if n := len(v.Bytes()); n > b.bytes {
			return fmt.Errorf("%s: %d bytes, want at most %d bytes", name, n, b.bytes)
		}
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return checkMessage(v.Message(), name+".")
	}
	return nil
}

// bounds checks every request, unary or streaming, against requestBounds
// before the handler sees it.
type bounds struct{}

func (bounds) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if m, ok := req.Any().(proto.Message); ok {
			if err := checkBounds(m); err != nil {
				return nil, err
			}
		}
		return next(ctx, req)
	}
}

func (bounds) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (bounds) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		return next(ctx, &checkedConn{StreamingHandlerConn: conn, check: func(msg any) error {
			if m, ok := msg.(proto.Message); ok {
				return checkBounds(m)
			}
			return nil
		}})
	}
}
