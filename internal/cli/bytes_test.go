package cli

import (
	"strings"
	"testing"
)

func TestParseBytesReadsUnitsAndPlainNumbers(t *testing.T) {
	for in, want := range map[string]int64{
		"0": 0, "512": 512, "16KiB": 16 << 10, "16k": 16 << 10, "16kib": 16 << 10, "512MiB": 512 << 20, "512 MiB": 512 << 20,
		"2GiB": 2 << 30, "1g": 1 << 30, "1TiB": 1 << 40, "1KB": 1000, "1MB": 1e6, "3GB": 3e9, "7B": 7, " 64KiB ": 64 << 10,
	} {
		if got, err := ParseBytes(in); err != nil || got != want {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for in, want := range map[string]string{
		"":                       `"" is ` + NotASize,
		"-1":                     `"-1" is ` + NotASize,
		"MiB":                    `"MiB" is ` + NotASize,
		"1.5GiB":                 `"1.5GiB" is ` + NotASize,
		"12 parsecs":             `"12 parsecs" is ` + NotASize,
		"9223372036854775807KiB": `"9223372036854775807KiB" is too large`,
	} {
		if n, err := ParseBytes(in); err == nil || err.Error() != want {
			t.Errorf("ParseBytes(%q) = %d, %v; want the error %q", in, n, err, want)
		}
	}
}

// Every size flag of every command is a Bytes: one table covers them.
func TestSizeFlagsTakeUnitsPlainNumbersAndOneErrorWording(t *testing.T) {
	for _, tc := range []struct {
		min, max int64
		in       string
		want     int64
		err      string
	}{
		{min: -1 << 62, max: 1 << 40, in: "64KiB", want: 64 << 10},
		{min: -1 << 62, max: 1 << 40, in: "65536", want: 65536},
		{min: -1 << 62, max: 1 << 40, in: "1MiB", want: 1 << 20},
		{min: -1 << 62, max: 1 << 40, in: "2MB", want: 2e6},
		{min: -1 << 62, max: 1 << 40, in: "-1", want: -1}, // "no limit" where negatives are allowed
		{min: 1, max: 1 << 30, in: "-5", err: `"-5" is ` + NotASize},
		{min: 1, max: 1 << 30, in: "0", err: "0 is out of range: want 1 to 1GiB"},
		{min: 1, max: 1 << 30, in: "2GiB", err: "2GiB is out of range: want 1 to 1GiB"},
		{min: 1, max: 1 << 30, in: "64 KiBs", err: `"64 KiBs" is ` + NotASize},
	} {
		var v int
		b := &Bytes[int]{P: &v, Min: tc.min, Max: tc.max}
		err := b.Set(tc.in)
		switch {
		case tc.err == "" && (err != nil || int64(v) != tc.want):
			t.Errorf("Set(%q): %d, %v; want %d", tc.in, v, err, tc.want)
		case tc.err != "" && (err == nil || err.Error() != tc.err):
			t.Errorf("Set(%q): error %v, want %q", tc.in, err, tc.err)
		}
	}
}

func TestSizeFlagShowsItsDefaultInUnitsAndReportsBadValuesInTheConventionsWords(t *testing.T) {
	fs := NewFlagSet("rally x")
	var n int
	BytesVar(fs, &n, "max-message-bytes", 64<<10, "largest message")
	if d := fs.Lookup("max-message-bytes").DefValue; d != "64KiB" {
		t.Errorf("default shown as %q, want 64KiB", d)
	}
	_, err := Parse(fs, []string{"--max-message-bytes", "64 furlongs"})
	want := `invalid value "64 furlongs" for --max-message-bytes: "64 furlongs" is ` + NotASize
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("error %v, want %q", err, want)
	}
	if _, err := Parse(fs, []string{"--max-message-bytes", "128KiB"}); err != nil || n != 128<<10 {
		t.Errorf("128KiB: %d, %v", n, err)
	}
}
