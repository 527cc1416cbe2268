package etcdembed_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/allot-dev/allot/internal/etcdembed"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Two members started side by side are both ready, each on its own ports,
// and stop when closed.
func TestStartTwo(t *testing.T) {
	a, ea, err := etcdembed.Start("a", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, eb, err := etcdembed.Start("b", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if ea == eb || ea == "" {
		t.Errorf("endpoints %q and %q: want two distinct ones", ea, eb)
	}
	if a.Server.Leader() == 0 || b.Server.Leader() == 0 {
		t.Error("a member has no leader though Start returned it ready")
	}
}
