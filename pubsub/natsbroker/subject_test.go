package natsbroker

import (
	"strings"
	"testing"
)

func TestSubjectCarriesTheTopicAsOneSafeTokenUnderThePrefix(t *testing.T) {
	cases := []struct {
		topic, subject string
	}{
		{"", "rally.t"},
		{"chat", "rally.tY2hhdA"},
		{"a.b", "rally.tYS5i"},
		{"*", "rally.tKg"},
		{">", "rally.tPg"},
		{"a b", "rally.tYSBi"},
		{"..", "rally.tLi4"},
		{"héllo", "rally.taMOpbGxv"},
		{"\x00\xff", "rally.tAP8"},
		{"??>>", "rally.tPz8-Pg"},
		{"\xff\xff\xff", "rally.t____"},
	}
	for _, c := range cases {
		got := subjectOf("rally", c.topic)
		if got != c.subject {
			t.Errorf("subjectOf(%q) = %q, want %q", c.topic, got, c.subject)
		}
		back, err := topicOf("rally", got)
		if err != nil || back != c.topic {
			t.Errorf("topicOf(%q) = %q, %v; want %q", got, back, err, c.topic)
		}
	}
}

func TestTopicOfRefusesSubjectsItDoesNotMake(t *testing.T) {
	for _, s := range []string{"rally", "rally.", "other.tYQ", "rally.YQ", "rally.tYQ=", "rally.tY", "rally.tYQ.x", "rally.t*", "rally.tYR"} {
		if topic, err := topicOf("rally", s); err == nil {
			t.Errorf("topicOf(%q) = %q, want an error", s, topic)
		}
	}
}

func TestPrefixMustBeTokensWithoutWildcardsOrSpaces(t *testing.T) {
	for _, p := range []string{"rally", "a.b.c", "rally-1_x"} {
		if err := checkPrefix(p); err != nil {
			t.Errorf("checkPrefix(%q) = %v, want nil", p, err)
		}
	}
	for _, p := range []string{"", ".", "a.", ".a", "a..b", "a.*", "a.>", "a b", "a\tb", "é"} {
		if err := checkPrefix(p); err == nil {
			t.Errorf("checkPrefix(%q) = nil, want an error", p)
		}
	}
}

// validToken reports whether tok is a NATS subject token that matches
// only itself: non-empty, no separator, no wildcard, no white space or
// control byte.
func validToken(tok string) bool {
	if tok == "" || tok == "*" || tok == ">" {
		return false
	}
	for i := 0; i < len(tok); i++ {
		if c := tok[i]; c <= ' ' || c == '.' || c == '*' || c == '>' || c >= 0x7f {
			return false
		}
	}
	return true
}

func FuzzSubjectIsSafeAndReversible(f *testing.F) {
	for _, s := range []string{"", "chat", "a.b", "*", ">", " ", "héllo", "\x00", strings.Repeat("x", 300)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, topic string) {
		s := subjectOf("rally.app", topic)
		toks := strings.Split(s, ".")
		if len(toks) != 3 || toks[0] != "rally" || toks[1] != "app" {
			t.Fatalf("subjectOf(%q) = %q, want three tokens under rally.app", topic, s)
		}
		if !validToken(toks[2]) {
			t.Fatalf("subjectOf(%q) = %q: last token is not a plain token", topic, s)
		}
		back, err := topicOf("rally.app", s)
		if err != nil || back != topic {
			t.Fatalf("topicOf(subjectOf(%q)) = %q, %v", topic, back, err)
		}
	})
}
