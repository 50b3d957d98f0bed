package verdict

import (
	"strings"
	"testing"
)

func TestMDTextIsInertInATableCell(t *testing.T) {
	got := mdText("\x1b[2J\x1b]0;owned\x07**bold** | <img src=x> [link](http://x) `code`\n# head")
	for _, bad := range []string{"\x1b", "\x07", "\n"} {
		if strings.Contains(got, bad) {
			t.Errorf("mdText left %q in %q", bad, got)
		}
	}
	for i, r := range got {
		if strings.ContainsRune("*<>[]|`", r) && (i == 0 || got[i-1] != '\\') {
			t.Errorf("mdText left %q unescaped at %d of %q", r, i, got)
		}
	}
}
