package orchestrator

import (
	"os"
	"testing"

	"github.com/arbiterlab/arbiter/internal/testkit/hostileplugin"
)

func TestMain(m *testing.M) {
	hostileplugin.MaybeServe() // the tests' hostile detector plugins are this binary
	os.Exit(m.Run())
}
