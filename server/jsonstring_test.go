package server

import (
	"bytes"
	"encoding/json"
	"testing"
)

// encodingJSONString is what encoding/json writes for text with HTML
// escaping off: the reference appendJSONString must match.
func encodingJSONString(text []byte) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.Encode(string(text))
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

var jsonStringSeeds = []string{
	"", "plain", "d->c & <b>", `quote " and backslash \`, "\b\f\n\r\t", "\x00\x01\x1f\x7f",
	"caf\u00e9 \u2028 \u2029 \U0001F600", "bad \xff byte", "cut \xe2\x82", "\xed\xa0\x80 surrogate",
}

func TestAppendJSONStringWritesWhatEncodingJSONWrites(t *testing.T) {
	for _, s := range jsonStringSeeds {
		want := encodingJSONString([]byte(s))
		if got := appendJSONString([]byte("x"), []byte(s)); !bytes.Equal(got, append([]byte("x"), want...)) {
			t.Errorf("appendJSONString(%q) = %s, want %s", s, got[1:], want)
		}
	}
	for b := range 256 {
		text := []byte{'a', byte(b), 'z'}
		if got, want := appendJSONString(nil, text), encodingJSONString(text); !bytes.Equal(got, want) {
			t.Errorf("appendJSONString(%q) = %s, want %s", text, got, want)
		}
	}
}

func FuzzAppendJSONString(f *testing.F) {
	for _, s := range jsonStringSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, text []byte) {
		if got, want := appendJSONString(nil, text), encodingJSONString(text); !bytes.Equal(got, want) {
			t.Fatalf("appendJSONString(%q) = %s, want %s", text, got, want)
		}
	})
}
