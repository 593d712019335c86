package server

import (
	"bytes"
	"encoding/json"
	"testing"
)

var requestSeeds = []string{
	`{"type":"publish","topic":"a","data":"text"}`,
	`{"type":"publish","topic":"a.b","data":{"k":[1,2,{"z":null}],"s":"}]\"{["},"id":3,"self":true}`,
	` { "type" : "subscribe" , "topic" : "a" , "id" : "x" } ` + "\n",
	`{"type":"unsubscribe","topic":"a","id":2,"self":false}`,
	`{"type":"presence","topic":"room"}`,
	`{"type":"publish","topic":"a","data":-1.5e3}`,
	`{"type":"publish","topic":"a","data":null,"id":null}`,
	`{"type":"publish","topic":"a","data":[]}`,
	`{}`,
	// Shapes left to encoding/json: its answer stands.
	`{"Type":"publish","topic":"a","data":1}`,
	`{"type":"publish","topic":"a","data":1,"data":2}`,
	`{"type":"pub\u006cish","topic":"a","data":1}`,
	`{"type":"publish","topic":"caf\u00e9","data":1}`,
	`{"type":"publish","topic":"a","data":1,"extra":true}`,
	`{"type":"subscribe","topic":"a","offset":3,"epoch":"e"}`,
	`{"type":"nope","id":[1]}`,
	`{"type":"publish","topic":"a","data":1 2}`,
	`{"type":"publish","topic":"a","data":{"a":1}}}`,
	`{"type":"publish","topic":"a","data":[1,}`,
	`{"type":"publish","topic":"a","data":tru}`,
	`{"type":"publish","topic":"a","self":truex}`,
	`{"type":"publish","topic":"a","data":"\ud800"}`,
	`{"type":1}`, `[]`, `null`, `"s"`, `{`, ``, `{"type":"publish",}`, `{,}`,
}

func TestRequestsReadWithoutEncodingJSONReadAsEncodingJSONReadsThem(t *testing.T) {
	quick := 0
	for _, s := range requestSeeds {
		if checkQuickRequest(t, []byte(s)) {
			quick++
		}
	}
	if quick < 9 {
		t.Fatalf("only %d of the usual requests were read without encoding/json, want the first 9", quick)
	}
}

func FuzzQuickRequest(f *testing.F) {
	for _, s := range requestSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, p []byte) { checkQuickRequest(t, p) })
}

// checkQuickRequest fails unless quickRequest either leaves p to
// encoding/json or decodes it exactly as encoding/json does; it reports
// whether quickRequest decoded it.
func checkQuickRequest(t *testing.T, p []byte) bool {
	t.Helper()
	var got request
	if !quickRequest(p, &got) {
		return false
	}
	var want request
	if err := json.Unmarshal(p, &want); err != nil {
		t.Fatalf("%q: read as %+v, but encoding/json refuses it: %v", p, got, err)
	}
	if got.Type != want.Type || got.Topic != want.Topic || !bytes.Equal(got.Data, want.Data) || !bytes.Equal(got.ID, want.ID) ||
		got.Self != want.Self || got.Offset != nil || want.Offset != nil || got.Epoch != want.Epoch ||
		(got.Data == nil) != (want.Data == nil) || (got.ID == nil) != (want.ID == nil) {
		t.Fatalf("%q: read as %+v, encoding/json reads %+v", p, got, want)
	}
	var r request
	if err := decodeRequest(p, &r); err != nil || r.Topic != want.Topic {
		t.Fatalf("%q: decodeRequest = %+v, %v", p, r, err)
	}
	return true
}
