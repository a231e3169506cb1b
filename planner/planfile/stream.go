package planfile

import (
	"bytes"
	"encoding/json"
)

// decodeStream decodes a plan file host by host: the top-level object's
// values are located without decoding them, the settings and the request
// are decoded as encoding/json decodes them, and each host is read into
// one reused Host (scanHost, or encoding/json for a host it does not take)
// and built into the engine's host before the next is read. The file's
// form of all hosts (a million CPU → pieces pairs at 10,000 hosts) is
// never held at once.
//
// ok is false for any input it does not take as it is: an error of any
// kind, a duplicate or differently spelt key, anything encoding/json would
// read differently. Decode then decodes the whole file, which gives the
// error (or the same Input: FuzzStreamIsWhole).
func decodeStream(b []byte) (*Input, bool) {
	s := scanner{b: b}
	vals, ok := s.topLevel()
	if !ok {
		return nil, false
	}
	var f File
	for k, v := range vals {
		if v == nil || k == keyHosts {
			continue
		}
		if decodeStrict(v, topLevelField(&f, k)) != nil {
			return nil, false
		}
	}
	in, err := f.params()
	if err != nil || vals[keyHosts] == nil {
		return nil, false
	}
	hb := newHostBuilder(in)
	hs := scanner{b: vals[keyHosts], keys: &keyCache{}}
	if !hs.byte('[') {
		return nil, false
	}
	var fh Host
	for i := 0; ; i++ {
		if i == 0 && hs.byte(']') {
			return nil, false // no hosts: the whole decode names it
		}
		start := hs.skipWS()
		end, ok := skipValue(hs.b, start)
		if !ok {
			return nil, false
		}
		h := &fh
		if !hs.host(&fh, end) {
			// A shape scanHost leaves to encoding/json (topology,
			// properties, escapes, ...): this host alone, into a fresh Host.
			h = &Host{}
			if decodeStrict(hs.b[start:end], h) != nil {
				return nil, false
			}
		}
		hs.i = end
		if hb.add(i, h) != nil {
			return nil, false
		}
		if hs.byte(',') {
			continue
		}
		if !hs.byte(']') || hs.skipWS() != len(hs.b) {
			return nil, false
		}
		break
	}
	if f.finish(in) != nil {
		return nil, false
	}
	return in, true
}

// The top-level keys of a plan file, in File's order.
const (
	keyShareBase = iota
	keyMaxFragmentCores
	keyHosts
	keyRequest
	keyResize
	keyBufferPercent
	keyOverbookingPercent
	keyConstraintPriorities
	numKeys
)

var topLevelKeys = [numKeys]string{"share_base", "max_fragment_cores", "hosts", "request", "resize",
	"buffer_percent", "overbooking_percent", "constraint_priorities"}

func topLevelField(f *File, k int) any {
	return [numKeys]any{&f.ShareBase, &f.MaxFragmentCores, &f.Hosts, &f.Request, &f.Resize,
		&f.BufferPercent, &f.OverbookingPercent, &f.ConstraintPriorities}[k]
}

// decodeStrict decodes one JSON value as the whole decode does (unknown
// fields refused, numbers kept exact); b is exactly the value.
func decodeStrict(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() || dec.InputOffset() != int64(len(b)) {
		return errStream
	}
	return nil
}

var errStream = &json.SyntaxError{}

// topLevel locates the top-level object's values, by key; a key that is
// not exactly one of File's, or given twice, or trailing data, is not ok.
func (s *scanner) topLevel() ([numKeys][]byte, bool) {
	var vals [numKeys][]byte
	if !s.byte('{') {
		return vals, false
	}
	if s.byte('}') {
		return vals, s.skipWS() == len(s.b)
	}
	for {
		key, ok := s.key()
		if !ok {
			return vals, false
		}
		k := -1
		for j, name := range topLevelKeys {
			if string(key) == name {
				k = j
			}
		}
		if k < 0 || vals[k] != nil {
			return vals, false
		}
		start := s.skipWS()
		end, ok := skipValue(s.b, start)
		if !ok {
			return vals, false
		}
		vals[k], s.i = s.b[start:end], end
		if s.byte(',') {
			continue
		}
		if !s.byte('}') {
			return vals, false
		}
		return vals, s.skipWS() == len(s.b)
	}
}

// The fields of a host, as bits (a key given twice is left to
// encoding/json, which merges).
var hostFields = map[string]int{"name": hName, "capacity": hCapacity, "used": hUsed, "numa_nodes": hNUMANodes,
	"instances": hInstances, "host_type": hHostType, "fault_domain": hFaultDomain, "upgrade_domain": hUpgradeDomain,
	"disabled": hDisabled, "maintenance": hMaintenance, "topology": hTopology, "properties": hProperties, "load_avg": hLoadAvg}

const (
	hName = 1 << iota
	hCapacity
	hUsed
	hNUMANodes
	hInstances
	hHostType
	hFaultDomain
	hUpgradeDomain
	hDisabled
	hMaintenance
	hTopology
	hProperties
	hLoadAvg
	hCapCPUs
	hCapMemory
	hUsedCPUs
	hUsedMemory
	hUsedNUMAMemory
	hUsedMemoryFirst
)

// host reads the host at s.i (ending at end) into fh, reusing fh's slices
// and maps. The topology, properties, load_avg and memory-first quotas are
// decoded by encoding/json, value by value; a null leaves a field as it is
// (as encoding/json does; an empty list or map builds the same host as
// none). Not ok for what it leaves to encoding/json for the whole host:
// keys spelt otherwise than exactly (encoding/json matches them without
// regard to case), keys given twice, escapes in strings, numbers that are
// not plain integers.
func (s *scanner) host(fh *Host, end int) bool {
	capCPUs, usedCPUs, numa := fh.Capacity.CPUs[:0], fh.Used.CPUs[:0], fh.NUMANodes[:0]
	inst, numaMem := clearMap(fh.Instances), clearMap(fh.Used.NUMAMemoryBytes)
	*fh = Host{Instances: inst, NUMANodes: numa}
	fh.Capacity.CPUs, fh.Used.CPUs, fh.Used.NUMAMemoryBytes = capCPUs, usedCPUs, numaMem
	var seen int
	once := func(bit int) bool {
		if seen&bit != 0 {
			return false
		}
		seen |= bit
		return true
	}
	str := func(dst *string) bool {
		v, ok := s.plainString()
		*dst = string(v)
		return ok
	}
	boolean := func(dst *bool) bool {
		v, ok := s.bool()
		*dst = v
		return ok
	}
	integer := func(dst *int64) bool {
		v, ok := s.int()
		*dst = v
		return ok
	}
	ok := s.object(func(key []byte) bool {
		bit, known := hostFields[string(key)]
		if !known || !once(bit) {
			return false
		}
		if s.null() {
			return true
		}
		switch bit {
		case hName:
			return str(&fh.Name)
		case hHostType:
			return str(&fh.HostType)
		case hFaultDomain:
			return str(&fh.FaultDomain)
		case hUpgradeDomain:
			return str(&fh.UpgradeDomain)
		case hDisabled:
			return boolean(&fh.Disabled)
		case hMaintenance:
			return boolean(&fh.Maintenance)
		case hTopology:
			return s.strict(&fh.Topology)
		case hProperties:
			return s.strict(&fh.Properties)
		case hLoadAvg:
			return s.strict(&fh.LoadAvg)
		case hCapacity:
			return s.object(func(key []byte) bool {
				switch string(key) {
				case "cpus":
					if !once(hCapCPUs) {
						return false
					}
					if s.null() {
						return true
					}
					var ok bool
					fh.Capacity.CPUs, ok = s.pieces(fh.Capacity.CPUs)
					return ok
				case "memory_bytes":
					return once(hCapMemory) && (s.null() || integer(&fh.Capacity.MemoryBytes))
				}
				return false
			})
		case hUsed:
			return s.object(func(key []byte) bool {
				switch string(key) {
				case "cpus":
					if !once(hUsedCPUs) {
						return false
					}
					if s.null() {
						return true
					}
					var ok bool
					fh.Used.CPUs, ok = s.pieces(fh.Used.CPUs)
					return ok
				case "memory_bytes":
					return once(hUsedMemory) && (s.null() || integer(&fh.Used.MemoryBytes))
				case "numa_memory_bytes":
					if !once(hUsedNUMAMemory) {
						return false
					}
					if s.null() {
						return true
					}
					if fh.Used.NUMAMemoryBytes == nil {
						fh.Used.NUMAMemoryBytes = map[string]int64{}
					}
					return intMap(s, fh.Used.NUMAMemoryBytes)
				case "memory_first_quotas":
					return once(hUsedMemoryFirst) && (s.null() || s.strict(&fh.Used.MemoryFirstQuotas))
				}
				return false
			})
		case hNUMANodes:
			return s.numaNodes(fh)
		case hInstances:
			if fh.Instances == nil {
				fh.Instances = map[string]int{}
			}
			return intMap(s, fh.Instances)
		}
		return false
	})
	return ok && s.i == end
}

// clearMap empties m for reuse.
func clearMap[M ~map[K]V, K comparable, V any](m M) M {
	clear(m)
	return m
}

// intMap reads an object of plain-string keys and integers into m (empty
// on entry); a key given twice is left to encoding/json.
func intMap[V int | int64](s *scanner, m map[string]V) bool {
	return s.object(func(key []byte) bool {
		if _, dup := m[string(key)]; dup {
			return false
		}
		v, ok := s.int()
		if !ok || int64(V(v)) != v {
			return false
		}
		m[string(key)] = V(v)
		return true
	})
}

// numaNodes reads `[{"id": N, "cpus": "0-63", "memory_bytes": M}, ...]`.
func (s *scanner) numaNodes(fh *Host) bool {
	if !s.byte('[') {
		return false
	}
	if s.byte(']') {
		fh.NUMANodes = fh.NUMANodes[:0] // [] is an empty list, not none
		return true
	}
	for {
		var n NUMANode
		var seen int
		ok := s.object(func(key []byte) bool {
			switch string(key) {
			case "id":
				v, ok := s.int()
				if !ok || int64(int(v)) != v || seen&1 != 0 {
					return false
				}
				seen |= 1
				id := int(v)
				n.ID = &id
				return true
			case "cpus":
				v, ok := s.plainString()
				if !ok || seen&2 != 0 {
					return false
				}
				seen |= 2
				n.CPUs = string(v)
				return true
			case "memory_bytes":
				v, ok := s.int()
				if !ok || seen&4 != 0 {
					return false
				}
				seen |= 4
				n.MemoryBytes = v
				return true
			}
			return false
		})
		if !ok {
			return false
		}
		fh.NUMANodes = append(fh.NUMANodes, n)
		if s.byte(',') {
			continue
		}
		return s.byte(']')
	}
}

// pieces reads a CPU → pieces object into dst (reused), as
// Pieces.UnmarshalJSON's fast path reads it, with the keys' strings shared.
func (s *scanner) pieces(dst Pieces) (Pieces, bool) {
	s.skipWS()
	start := s.i
	end, ok := skipValue(s.b, start)
	if !ok {
		return dst, false
	}
	out, ok := appendPieces(dst[:0], s.b[start:end], s.keys)
	s.i = end
	return out, ok
}
