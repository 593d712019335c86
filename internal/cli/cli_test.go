package cli

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"strings"
	"testing"
)

func TestParseTakesFlagsAnywhereAndReportsErrorsWithTwoDashes(t *testing.T) {
	fs := NewFlagSet("rally x")
	n := fs.Int("count", 1, "how many")
	b := fs.Bool("v", false, "verbose")
	pos, err := Parse(fs, []string{"a", "--count", "3", "b", "-v", "--", "--count"})
	if err != nil || *n != 3 || !*b || strings.Join(pos, " ") != "a b --count" {
		t.Fatalf("Parse = %q, %v; count %d, v %v", pos, err, *n, *b)
	}
	for args, want := range map[string]string{
		"--bogus":      "unknown flag --bogus",
		"-bogus":       "unknown flag --bogus",
		"--count x":    `invalid value "x" for --count: parse error`,
		"--count":      "--count needs a value",
		"-v=maybe":     `invalid value "maybe" for -v: parse error`,
		"a b --count=": `invalid value "" for --count: parse error`,
	} {
		_, err := Parse(errorCaseFlags(), strings.Fields(args))
		var ue *UsageError
		if !errors.As(err, &ue) || err.Error() != want {
			t.Errorf("Parse(%q) = %v, want the usage error %q", args, err, want)
		}
	}
	if _, err := Parse(errorCaseFlags(), []string{"--help"}); err != ErrHelp {
		t.Errorf("--help: %v, want ErrHelp", err)
	}
}

// errorCaseFlags is the flag set of the error cases.
func errorCaseFlags() *flag.FlagSet {
	fs := NewFlagSet("rally x")
	fs.Int("count", 1, "how many")
	fs.Bool("v", false, "verbose")
	return fs
}

func TestExitPrintsHelpOnStdoutAndErrorsInOneLine(t *testing.T) {
	var out, errs bytes.Buffer
	if got := Exit("rally x", ErrHelp, &out, &errs, func(w io.Writer) { w.Write([]byte("Usage: rally x\n")) }); got != 0 || out.String() != "Usage: rally x\n" || errs.Len() != 0 {
		t.Fatalf("help: %d %q %q", got, out.String(), errs.String())
	}
	out.Reset()
	if got := Exit("rally x", Usagef("no %s", "URL"), &out, &errs, nil); got != 2 || out.Len() != 0 || errs.String() != "rally x: no URL (see rally x --help)\n" {
		t.Fatalf("usage error: %d %q %q", got, out.String(), errs.String())
	}
	if got := Exit("rally x", nil, &out, &errs, nil); got != -1 {
		t.Fatalf("no error: %d, want -1", got)
	}
}
