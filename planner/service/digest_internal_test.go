package service

import (
	"encoding/json"
	"testing"

	"github.com/pinfold/pinfold/planner/model"
)

// TestDeployDigestKeepsItsForm: a deploy's request-ID digest is taken of
// the JSON layout the request had at c14b09e, so that a deploy repeated
// with its request ID on a planner of the other version during an
// upgrade is answered from its record, not refused as other content
// (attack review of 4edb38f: the digest followed the Go struct and
// changed with it). The expected text is what c14b09e's DeployRequest
// marshalled to; a priority, new since, is in it only when set.
func TestDeployDigestKeepsItsForm(t *testing.T) {
	r := DeployRequest{Service: "web", Count: 2, Deploy: model.Deploy{Spec: model.Spec{Image: "i"},
		Size: model.Size{Pieces: 100, Bind: true, Memory: 64 << 20}, Scheduling: model.Scheduling{Strategy: "auto"}}}
	const old = `{"Service":"web","image":"i","Count":2,"Pieces":100,"Bind":true,"WholeCores":false,"Memory":67108864,"MemorySoft":0,` +
		`"Strategy":"auto","MaxPerHost":0,"Rules":{"affinity":{"hard":null,"soft":null},"anti_affinity":{"hard":null,"soft":null}},"UseBuffer":false,"CreateOnly":false}`
	b, err := json.Marshal(r.digestForm())
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != old {
		t.Errorf("digest form\n %s\nwant c14b09e's\n %s", b, old)
	}
	r.Priority = model.PriorityBatch
	if b2, _ := json.Marshal(r.digestForm()); string(b2) == old {
		t.Errorf("a priority does not change the digest form: two deploys that differ in it would be one call")
	}
	// Control: the request itself, as the digest was taken before, has
	// another form.
	if b3, _ := json.Marshal(DeployRequest{Service: "web", Count: 2, Deploy: r.Deploy}); string(b3) == old {
		t.Errorf("the request's own JSON is c14b09e's form: the test cannot tell")
	}
}
