package api_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/pinfold/pinfold/planner/api"
	"github.com/pinfold/pinfold/planner/model"
	"github.com/pinfold/pinfold/planner/service"
	"github.com/pinfold/pinfold/planner/state"
	"github.com/pinfold/pinfold/planner/state/statetest"
	"github.com/pinfold/pinfold/planner/topology/topologytest"
)

// unaryMethods are the API's unary methods (WatchInstances streams).
var unaryMethods = []string{"RegisterHost", "ListHosts", "GetHost", "SetHost", "SetHostEnabled", "RemoveHost", "SetHostMaintenance",
	"GetPlacementSettings", "SetPlacementSettings", "Health", "Deploy", "Resize", "Remove", "Replace", "ListInstances", "Capacity",
	"Heartbeat", "ReportStatus", "GetService"}

// FuzzAPI sends any JSON body to any method through the real handler over
// a real store: never a panic or an internal error, and a refused request
// changes nothing (the store's revision stays where it was).
func FuzzAPI(f *testing.F) {
	c := statetest.Start(f, 1)
	st := c.Open(f, state.Config{ShareBase: 100, MaxFragmentCores: -1}, model.Protocol)
	svc := service.New(st, nil)
	svc.CheckIndex()
	ctx := context.Background()
	if _, err := svc.RegisterHost(ctx, service.RegisterHostRequest{Name: "h1", Topology: topologytest.Laptop().Topology(), Settings: state.CapacitySettings{MemoryShare: 1}}); err != nil {
		f.Fatal(err)
	}
	ins, err := svc.Deploy(ctx, service.DeployRequest{Service: "web", Count: 2, Deploy: model.Deploy{Spec: model.Spec{Image: "img"}, Size: model.Size{Pieces: 150, Bind: true, Memory: 1 << 30}}})
	if err != nil {
		f.Fatal(err)
	}
	srv := httptest.NewServer(api.Handler(svc, api.Options{}))
	f.Cleanup(srv.Close)
	tj, _ := json.Marshal(topologytest.Laptop().Topology())
	for i, body := range []string{
		`{"name":"h2","topologyJson":` + string(mustJSON(tj)) + `}`, `{}`, `{"name":"h1"}`, `{"name":"h1","removeCpus":"0-7"}`,
		`{"name":"h1","enabled":false}`, `{"name":"h1"}`, `{"name":"h1","graceSeconds":"-1"}`, `{}`, `{"bufferPercent":{"cpu":2}}`, `{}`,
		`{"service":"db","count":3,"cpu":"1.7","bind":true,"memoryBytes":"1073741824","constraint":"(("}`,
		`{"target":"web","cpuDelta":"-9"}`, `{"target":"nope"}`, `{"target":"` + ins[0].ID + `","image":""}`, `{"host":"h1"}`,
		`{"cpu":"1e9"}`, `{"host":"h1","protocol":999,"ttlSeconds":0}`, `{"host":"h1","id":"` + ins[0].ID + `","state":"running","pid":-5}`,
	} {
		f.Add(uint8(i), []byte(body))
	}
	f.Fuzz(func(t *testing.T, m uint8, body []byte) {
		method := unaryMethods[int(m)%len(unaryMethods)]
		if err := st.Sync(ctx); err != nil {
			t.Fatal(err)
		}
		before := st.Rev()
		req, _ := http.NewRequest("POST", srv.URL+"/pinfold.v1.PlannerService/"+method, strings.NewReader(string(body)))
		req.Header.Set("Content-Type", "application/json")
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatalf("%s: %v (did the handler panic?)", method, err)
		}
		out, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
		if resp.StatusCode >= 500 {
			t.Fatalf("%s %s: HTTP %d %s", method, body, resp.StatusCode, out)
		}
		if resp.StatusCode != http.StatusOK {
			if err := st.Sync(ctx); err != nil {
				t.Fatal(err)
			}
			if after := st.Rev(); after != before {
				t.Fatalf("%s %s was refused (%s) but the store moved from revision %d to %d", method, body, out, before, after)
			}
		}
	})
}

// mustJSON is b as a JSON string in protobuf's form for bytes (base64).
func mustJSON(b []byte) []byte {
	out, _ := json.Marshal(base64.StdEncoding.EncodeToString(b))
	return out
}
