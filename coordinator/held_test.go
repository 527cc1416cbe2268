package coordinator

import (
	"testing"

	"google.golang.org/protobuf/proto"

	allotv1 "github.com/allot-dev/allot/proto/allot/v1"
	"github.com/allot-dev/allot/shares"
)

// A pod of an older term that holds no grant says so with an empty held
// list; on the wire an empty list is no list, so held_sent carries it.
// Without it the leader took the pod for one that had not said what it
// holds and answered it "learning" for ever.
func TestHeldSurvivesTheWire(t *testing.T) {
	g := shares.Grant{Rate: 5, Burst: 2, FloorRate: 1, FloorBurst: 1, Epoch: 7, BudgetRate: 100, BudgetBurst: 20}
	for _, tc := range []struct {
		name string
		req  *allotv1.ReportRequest
		want []shares.Entry // nil: none sent
	}{
		{"none sent", &allotv1.ReportRequest{}, nil},
		{"holds nothing", &allotv1.ReportRequest{HeldSent: true}, []shares.Entry{}},
		{"one grant", &allotv1.ReportRequest{HeldSent: true, Held: []*allotv1.Grant{ToGrantPB(shares.Entry{Tenant: "t", Grant: g})}},
			[]shares.Entry{{Tenant: "t", Grant: g}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := proto.Marshal(tc.req)
			if err != nil {
				t.Fatal(err)
			}
			var got allotv1.ReportRequest
			if err := proto.Unmarshal(b, &got); err != nil {
				t.Fatal(err)
			}
			h := heldFromPB(&got)
			if (h == nil) != (tc.want == nil) || len(h) != len(tc.want) {
				t.Fatalf("held = %#v, want %#v", h, tc.want)
			}
			for i := range h {
				if h[i] != tc.want[i] {
					t.Fatalf("held[%d] = %+v, want %+v", i, h[i], tc.want[i])
				}
			}
		})
	}
}
