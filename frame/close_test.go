package frame

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

func TestValidCloseCodeFollowsTheRFCAndTheIANARegistry(t *testing.T) {
	tests := []struct {
		code  uint16
		valid bool
	}{
		{0, false}, {999, false},
		{1000, true}, {1001, true}, {1002, true}, {1003, true},
		{1004, false}, // reserved
		{1005, false}, // no status: local only
		{1006, false}, // abnormal: local only
		{1007, true}, {1008, true}, {1009, true}, {1010, true}, {1011, true},
		{1012, true}, {1013, true}, {1014, true},
		{1015, false}, // TLS handshake: local only
		{1016, false}, {2999, false},
		{3000, true}, {4999, true},
		{5000, false}, {65535, false},
	}
	for _, tt := range tests {
		if got := ValidCloseCode(tt.code); got != tt.valid {
			t.Errorf("ValidCloseCode(%d) = %v, want %v", tt.code, got, tt.valid)
		}
	}
}

func TestAppendClosePayloadWritesCodeThenReason(t *testing.T) {
	reason123 := strings.Repeat("r", 123)
	tests := []struct {
		code   uint16
		reason string
		want   string // hex
	}{
		{0, "", ""},
		{1000, "", "03e8"},
		{1001, "bye", "03e9 627965"},
		{4999, "", "1387"},
		{3000, "é€𐍈", "0bb8 c3a9 e282ac f0908d88"},
		{1011, reason123, "03f3" + strings.Repeat("72", 123)},
	}
	for _, tt := range tests {
		dst := []byte{0xAB}
		got, err := AppendClosePayload(dst, tt.code, []byte(tt.reason))
		want := append([]byte{0xAB}, unhex(t, tt.want)...)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("AppendClosePayload(%d, %.10q) = %x, %v; want %x, nil", tt.code, tt.reason, got, err, want)
		}
	}
}

func TestAppendClosePayloadRejectsCallerMistakesNamingTheValue(t *testing.T) {
	tests := []struct {
		code     uint16
		reason   string
		mentions string
	}{
		{0, "x", "code 0"},
		{1005, "", "1005"},
		{1006, "gone", "1006"},
		{1015, "", "1015"},
		{999, "", "999"},
		{5000, "", "5000"},
		{1000, strings.Repeat("r", 124), "124 bytes"},
		{1000, "ok\xffno", "byte 2"},
		{1000, "\xe2\x82", "byte 2"}, // truncated at the end
	}
	for _, tt := range tests {
		dst := []byte{0xAB}
		got, err := AppendClosePayload(dst, tt.code, []byte(tt.reason))
		if err == nil || !strings.Contains(err.Error(), tt.mentions) {
			t.Errorf("AppendClosePayload(%d, %.10q) error = %v, want one mentioning %q", tt.code, tt.reason, err, tt.mentions)
		}
		var pe *ProtocolError
		if errors.As(err, &pe) {
			t.Errorf("AppendClosePayload(%d, %.10q) returned a *ProtocolError for a caller mistake", tt.code, tt.reason)
		}
		if !bytes.Equal(got, dst) {
			t.Errorf("AppendClosePayload(%d, %.10q) changed dst to %x on error", tt.code, tt.reason, got)
		}
	}
}

func TestParseClosePayloadReadsCodeAndReasonAndFailsWithTheRightCode(t *testing.T) {
	tests := []struct {
		wire     string
		code     uint16
		reason   string
		failCode uint16 // 0 = no error
	}{
		{"", CloseNoStatus, "", 0},
		{"03", 0, "", 1002},
		{"03e8", 1000, "", 0},
		{"03e9 627965", 1001, "bye", 0},
		{"0fa0 " + strings.Repeat("61", 123), 4000, strings.Repeat("a", 123), 0},
		{"0000", 0, "", 1002},
		{"03e7", 0, "", 1002},
		{"03ec", 0, "", 1002}, // 1004
		{"03ed", 0, "", 1002}, // 1005
		{"03ee", 0, "", 1002}, // 1006
		{"03f7", 0, "", 1002}, // 1015
		{"1388", 0, "", 1002}, // 5000
		{"03e8 ff", 0, "", 1007},
		{"03e8 6f6b c3", 0, "", 1007},  // truncated character
		{"03e8 eda080", 0, "", 1007},   // surrogate
		{"03ed ff", 0, "", 1002},       // the code is checked first
		{"0bb8 f4908080", 0, "", 1007}, // above U+10FFFF
		{"0bb8 f48fbfbf", 3000, "\U0010FFFF", 0},
	}
	for _, tt := range tests {
		p := unhex(t, tt.wire)
		code, reason, err := ParseClosePayload(p)
		if tt.failCode != 0 {
			var pe *ProtocolError
			if !errors.As(err, &pe) || pe.Code != tt.failCode {
				t.Errorf("ParseClosePayload(%s) error = %v, want a %d *ProtocolError", tt.wire, err, tt.failCode)
			}
			continue
		}
		if err != nil || code != tt.code || string(reason) != tt.reason {
			t.Errorf("ParseClosePayload(%s) = %d, %q, %v; want %d, %q, nil", tt.wire, code, reason, err, tt.code, tt.reason)
		}
	}
}

func TestParseClosePayloadReasonAliasesTheInput(t *testing.T) {
	p := unhex(t, "03e8 627965")
	_, reason, err := ParseClosePayload(p)
	if err != nil || &reason[0] != &p[2] {
		t.Fatalf("reason does not alias p[2:] (err %v)", err)
	}
}

func TestClosePayloadRoundTripsForEveryValidCode(t *testing.T) {
	for c := 0; c <= 0xFFFF; c++ {
		code := uint16(c)
		if !ValidCloseCode(code) {
			continue
		}
		p, err := AppendClosePayload(nil, code, []byte("why"))
		if err != nil {
			t.Fatalf("AppendClosePayload(%d) = %v", code, err)
		}
		got, reason, err := ParseClosePayload(p)
		if err != nil || got != code || string(reason) != "why" {
			t.Fatalf("round trip of %d gave %d, %q, %v", code, got, reason, err)
		}
	}
}
