package natsbroker

import (
	"bytes"
	"encoding/hex"
	"testing"

	"github.com/rallyws/rally"
)

func TestMessageHeaderIsVersionTypeNodeStreamSequence(t *testing.T) {
	got := appendMessage(nil, head{typ: rally.Binary, node: "n1", stream: 0x01020304, seq: 5}, []byte("hi"))
	want := "01" + "02" + "02" + "6e31" + "01020304" + "0000000000000005" + "6869"
	if hex.EncodeToString(got) != want {
		t.Fatalf("message = %x, want %s", got, want)
	}
	typ, node, stream, seq, payload, err := parseMessage(got, wireVersion)
	if err != nil || typ != rally.Binary || string(node) != "n1" || stream != 0x01020304 || seq != 5 || string(payload) != "hi" {
		t.Fatalf("parseMessage = %v %q %x %d %q %v", typ, node, stream, seq, payload, err)
	}
}

func TestParseMessageRefusesWhatItCannotRead(t *testing.T) {
	for _, h := range []string{
		"",
		"0101",
		"020101" + "6e" + "00000000" + "0000000000000001", // version 2
		"010301" + "6e" + "00000000" + "0000000000000001", // type 3
		"010100" + "00000000" + "0000000000000001",        // empty node
		"010105" + "6e" + "00000000" + "0000000000000001", // node longer than the message
		"010101" + "6e" + "00000000" + "00000000000000",   // sequence cut short
	} {
		p, _ := hex.DecodeString(h)
		if _, _, _, _, _, err := parseMessage(p, wireVersion); err == nil {
			t.Errorf("parseMessage(%s) = nil error, want one", h)
		}
	}
}

func FuzzParseMessage(f *testing.F) {
	f.Add(appendMessage(nil, head{typ: rally.Text, node: "a", stream: 1, seq: 1}, []byte("x")))
	f.Add(appendMessage(nil, head{typ: rally.Binary, node: "node-7", stream: 9, seq: 1 << 40}, nil))
	f.Add([]byte{1, 1, 255})
	f.Fuzz(func(t *testing.T, p []byte) {
		typ, node, stream, seq, payload, err := parseMessage(p, wireVersion)
		if err != nil {
			return
		}
		again := appendMessage(nil, head{typ: typ, node: string(node), stream: stream, seq: seq}, payload)
		if !bytes.Equal(again, p) {
			t.Fatalf("parse then append = %x, want %x", again, p)
		}
	})
}
