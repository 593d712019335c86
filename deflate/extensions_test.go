package deflate

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// ext builds an expected extension from "name", "p", "p=v" words.
func ext(name string, params ...string) extension {
	e := extension{name: name}
	for _, p := range params {
		n, v, ok := strings.Cut(p, "=")
		e.params = append(e.params, param{name: n, value: v, hasValue: ok})
	}
	return e
}

func TestParseExtensionsReadsTheHeaderGrammarOfRFC6455(t *testing.T) {
	tests := []struct {
		name   string
		header []string
		want   []extension
	}{
		{"no header", nil, nil},
		{"empty value", []string{""}, nil},
		{"one name", []string{"permessage-deflate"}, []extension{ext("permessage-deflate")}},
		{"parameter without value", []string{"permessage-deflate; client_max_window_bits"},
			[]extension{ext("permessage-deflate", "client_max_window_bits")}},
		{"no spaces", []string{"permessage-deflate;client_max_window_bits=10;server_no_context_takeover"},
			[]extension{ext("permessage-deflate", "client_max_window_bits=10", "server_no_context_takeover")}},
		{"spaces and tabs around separators", []string{" \tpermessage-deflate \t; a = 1 ;\tb\t, x "},
			[]extension{ext("permessage-deflate", "a=1", "b"), ext("x")}},
		{"quoted value", []string{`permessage-deflate; server_max_window_bits="10"`},
			[]extension{ext("permessage-deflate", "server_max_window_bits=10")}},
		{"quoted value with escapes", []string{`permessage-deflate; server_max_window_bits="1\0"`},
			[]extension{ext("permessage-deflate", "server_max_window_bits=10")}},
		{"several offers", []string{"permessage-deflate; client_max_window_bits=10, permessage-deflate"},
			[]extension{ext("permessage-deflate", "client_max_window_bits=10"), ext("permessage-deflate")}},
		{"unknown extensions kept for the caller to skip", []string{"x-webkit-deflate-frame, permessage-deflate"},
			[]extension{ext("x-webkit-deflate-frame"), ext("permessage-deflate")}},
		{"empty list elements", []string{", a ,, b,"}, []extension{ext("a"), ext("b")}},
		{"several header lines form one list", []string{"a; x=1", "", "b"}, []extension{ext("a", "x=1"), ext("b")}},
		{"case is kept", []string{"PerMessage-Deflate; Server_No_Context_Takeover"},
			[]extension{ext("PerMessage-Deflate", "Server_No_Context_Takeover")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseExtensions(tt.header)
			if err != nil {
				t.Fatalf("parseExtensions(%q) failed: %v", tt.header, err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("parseExtensions(%q) = %+v, want %+v", tt.header, got, tt.want)
			}
		})
	}
}

func TestParseExtensionsRejectsMalformedHeaders(t *testing.T) {
	tests := []struct{ header, why string }{
		{";", "expected an extension name"},
		{"permessage-deflate;", "expected a parameter name"},
		{"permessage-deflate; a; ", "expected a parameter name"},
		{"permessage-deflate; =10", "expected a parameter name"},
		{"permessage-deflate; a=", "expected a parameter value"},
		{"permessage-deflate; a=@", "expected a parameter value"},
		{"permessage-deflate a", "expected ';' or ','"},
		{"permessage-deflate=1", "expected ';' or ','"},
		{"permessage-deflate; a=1=2", "expected ';' or ','"},
		{"permessage-deflate; a=1 2", "expected ';' or ','"},
		{`permessage-deflate; a="1"2`, "expected ';' or ','"},
		{`permessage-deflate; a="1 0"`, "quoted value is not a token"},
		{`permessage-deflate; a=""`, "quoted value is not a token"},
		{`permessage-deflate; a="a,b"`, "quoted value is not a token"},
		{`permessage-deflate; a="10`, "unterminated quoted value"},
		{`permessage-deflate; a="10\"`, "unterminated quoted value"},
		{`permessage-deflate; a="10\`, "backslash at the end"},
		{"permessage-deflate; a=\"1\x7f\"", "invalid character in quoted value"},
		{"permessage-deflate; a=\"1\\\x01\"", "invalid escaped character"},
		{"permessage-deflate\x00", "expected ';' or ','"},
		{"perméssage-deflate", "expected ';' or ','"},
		{"é", "expected an extension name"},
		{"permessage-deflate\r\n; a", "expected ';' or ','"},
	}
	for _, tt := range tests {
		t.Run(tt.header, func(t *testing.T) {
			got, err := parseExtensions([]string{"x-ok", tt.header})
			if err == nil {
				t.Fatalf("parseExtensions(%q) = %+v, want an error", tt.header, got)
			}
			if !errors.Is(err, errMalformed) || !strings.Contains(err.Error(), tt.why) {
				t.Fatalf("parseExtensions(%q) error %q, want one wrapping errMalformed saying %q", tt.header, err, tt.why)
			}
		})
	}
}

func TestFormattedExtensionsParseBackToThemselves(t *testing.T) {
	for _, e := range []extension{
		ext("permessage-deflate"),
		ext("permessage-deflate", "server_no_context_takeover", "client_max_window_bits=10"),
		ext("x", "a", "b=c", "d=!#$%&'*+-.^_`|~09AZaz"),
	} {
		s := e.String()
		got, err := parseExtensions([]string{s})
		if err != nil || len(got) != 1 || !reflect.DeepEqual(got[0], e) {
			t.Fatalf("parseExtensions(%q) = %+v, %v; want %+v", s, got, err, e)
		}
	}
	if s := ext("permessage-deflate", "a", "b=1").String(); s != "permessage-deflate; a; b=1" {
		t.Fatalf("String() = %q", s)
	}
}
