package service

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/pinfold/pinfold/planner/planfile"
)

// ExportPieceBytes is about how large one piece of an exported plan file
// is: hosts are added to a piece until it holds this much.
const ExportPieceBytes = 256 << 10

// ExportPlan sends the schedulable hosts, as placement sees them, and the
// cluster's settings as a plan file without a request, in pieces that
// concatenated are the file: planning it offline places what a deploy
// would now. The file is json.Marshal(planfile.Export(…)) byte for byte,
// written a host at a time from the shared placement view, so that a call
// holds one piece, not the file. All pieces come from one view (one
// revision of each host). A file over planfile.MaxFileSize (which pinfold
// plan could not read back) ends in an error after the pieces sent. send
// must not keep a piece past its return (its buffer is reused).
func (s *Service) ExportPlan(send func(piece []byte) error) error {
	hosts := s.st.SchedulablePlacement().Hosts // sorted by name; shared, never changed
	head, err := json.Marshal(planfile.Export(s.params, s.st.PlacementSettings(), nil))
	if err != nil {
		return err
	}
	if len(hosts) == 0 {
		return send(head)
	}
	// The file's fields in order: share_base and max_fragment_cores (two
	// numbers), then hosts, null here; the hosts go where the null is.
	const null = `,"hosts":null`
	at := bytes.Index(head, []byte(null))
	if at < 0 {
		return fmt.Errorf("export: no %s in the plan file's settings %.200s", null, head)
	}
	buf := make([]byte, 0, ExportPieceBytes+ExportPieceBytes/4)
	buf = append(append(buf, head[:at]...), `,"hosts":[`...)
	total := 0
	flush := func() error {
		total += len(buf)
		if total > planfile.MaxFileSize {
			return errf(Exhausted, "the plan file of %d schedulable hosts is over the %d bytes a plan file may have", len(hosts), planfile.MaxFileSize)
		}
		err := send(buf)
		buf = buf[:0]
		return err
	}
	for i, ph := range hosts {
		if i > 0 {
			buf = append(buf, ',')
		}
		b, err := json.Marshal(planfile.ExportHost(ph))
		if err != nil {
			return fmt.Errorf("export: host %q: %w", ph.Name, err)
		}
		buf = append(buf, b...)
		if len(buf) >= ExportPieceBytes {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	buf = append(append(buf, ']'), head[at+len(null):]...)
	return flush()
}
