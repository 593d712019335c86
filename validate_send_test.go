package rally_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/rallyws/rally"
	"github.com/rallyws/rally/internal/rawpeer"
)

// With ConnOptions.ValidateUTF8OnSend, text that is not valid UTF-8 is
// refused at the call with an *InvalidUTF8Error naming the first bad byte,
// and nothing of it reaches the wire: the next frame the peer reads is the
// next valid message.
func TestValidateUTF8OnSendRefusesInvalidTextAtTheCall(t *testing.T) {
	c, p := acceptConn(t, &rally.AcceptOptions{ConnOptions: rally.ConnOptions{ValidateUTF8OnSend: true}})
	bad := []byte("ok\xc3\x28") // C3 needs a continuation byte; 28 is not one
	var ie *rally.InvalidUTF8Error
	if err := c.Write(ctxT(t), rally.Text, bad); !errors.As(err, &ie) || ie.Offset != 3 {
		t.Fatalf("Write of invalid text = %v, want *InvalidUTF8Error at offset 3", err)
	}
	if st, err := c.Send(rally.Text, []byte("cut \xe2\x82")); st != rally.Dropped || !errors.As(err, &ie) || ie.Offset != 6 {
		t.Fatalf("Send of text ending inside a character = %v, %v; want dropped, *InvalidUTF8Error at offset 6", st, err)
	}
	if st, err := c.Send(rally.Binary, bad); st == rally.Dropped || err != nil {
		t.Fatalf("Send of the same bytes as binary = %v, %v; want them sent", st, err)
	}
	if err := c.Write(ctxT(t), rally.Text, []byte("h\xc3\xa9llo")); err != nil {
		t.Fatalf("Write of valid text: %v", err)
	}
	for _, want := range []rawpeer.Frame{rawpeer.Binary(bad), rawpeer.Text("h\xc3\xa9llo")} {
		f, err := p.ReadFrame()
		if err != nil || f.Opcode != want.Opcode || string(f.Payload) != string(want.Payload) {
			t.Fatalf("peer read %v %q (%v), want opcode %d %q", f.Opcode, f.Payload, err, want.Opcode, want.Payload)
		}
	}
}

// Off by default: text goes out as the caller's bytes.
func TestTextIsNotValidatedOnSendByDefault(t *testing.T) {
	c, p := acceptConn(t, nil)
	bad := []byte("\xff")
	if err := c.Write(ctxT(t), rally.Text, bad); err != nil {
		t.Fatalf("Write: %v", err)
	}
	if f, err := p.ReadFrame(); err != nil || f.Opcode != rawpeer.OpText || string(f.Payload) != "\xff" {
		t.Fatalf("peer read %v %x (%v), want the text frame ff", f.Opcode, f.Payload, err)
	}
}

// A validating Writer never ends a fragment inside a character: a
// character split across Write calls, or across the writer's buffer, goes
// out whole in one fragment. An invalid Write is refused whole; a message
// that would end inside a character ends before it, and Close says so.
func TestValidatingWriterKeepsCharactersWholeAcrossFragments(t *testing.T) {
	c, p := acceptConn(t, &rally.AcceptOptions{ConnOptions: rally.ConnOptions{ValidateUTF8OnSend: true}})
	w, err := c.Writer(ctxT(t), rally.Text)
	if err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("a", 32<<10-1) + "\xe2" // the buffer fills inside "€"
	var ie *rally.InvalidUTF8Error
	if _, err := w.Write([]byte(big)); err != nil {
		t.Fatalf("Write: %v", err)
	}
	if _, err := w.Write([]byte("\x82\xff")); !errors.As(err, &ie) || ie.Offset != 1 {
		t.Fatalf("Write with a bad byte = %v, want *InvalidUTF8Error at offset 1", err)
	}
	if _, err := w.Write([]byte("\x82\xac!\xf0\x9f")); err != nil {
		t.Fatalf("Write: %v", err)
	}
	if err := w.Close(); !errors.As(err, &ie) {
		t.Fatalf("Close of a message ending inside a character = %v, want *InvalidUTF8Error", err)
	}
	var msg []byte
	for {
		f, err := p.ReadFrame()
		if err != nil {
			t.Fatal(err)
		}
		if !validWhole(f.Payload) {
			t.Fatalf("fragment of %d bytes ends or starts inside a character", len(f.Payload))
		}
		msg = append(msg, f.Payload...)
		if f.Fin {
			break
		}
	}
	if want := strings.Repeat("a", 32<<10-1) + "€!"; string(msg) != want {
		t.Fatalf("message of %d bytes, want %d bytes ending in \"€!\"", len(msg), len(want))
	}
}

func validWhole(b []byte) bool {
	return strings.ToValidUTF8(string(b), "\ufffd") == string(b)
}
