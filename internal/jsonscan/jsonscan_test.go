package jsonscan

import "testing"

func TestValueEndFindsWhereEachKindOfValueEnds(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int
	}{
		{`"a"x`, 3},
		{`"a\"b"x`, 6},
		{`"a\\"x`, 5},
		{`{"k":[1,"]"]},`, 13},
		{`[[]]`, 4},
		{`12,`, 2},
		{`true}`, 4},
		{`null`, 4},
		{`},`, 0},
		{`"open`, -1},
		{`{"k":1`, -1},
		{``, -1},
	} {
		if got := ValueEnd([]byte(tc.in), 0); got != tc.want {
			t.Errorf("ValueEnd(%q) = %d, want %d", tc.in, got, tc.want)
		}
	}
}

func TestSkipSpaceStopsAtTheFirstOtherByte(t *testing.T) {
	if got := SkipSpace([]byte(" \t\r\n{"), 0); got != 4 {
		t.Errorf("SkipSpace = %d, want 4", got)
	}
	if got := SkipSpace([]byte("  "), 1); got != 2 {
		t.Errorf("SkipSpace at the end = %d, want 2", got)
	}
}
