package deflate

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
)

func FuzzExtensionHeader(f *testing.F) {
	for _, s := range []string{
		"", "permessage-deflate", "permessage-deflate; client_max_window_bits",
		"permessage-deflate; server_no_context_takeover; client_no_context_takeover; server_max_window_bits=10; client_max_window_bits=9",
		`permessage-deflate; server_max_window_bits="1\0"`, "x-webkit-deflate-frame, permessage-deflate, permessage-deflate; foo",
		"permessage-deflate; server_max_window_bits=08", ", ,", "a;b=c;d", `a; b="`, "permessage-deflate;;", "permessage-deflate; client_max_window_bits=8",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, header string) {
		exts, perr := parseExtensions([]string{header})
		if perr != nil {
			if !errors.Is(perr, errMalformed) {
				t.Fatalf("parse error %v does not wrap errMalformed", perr)
			}
		} else {
			// What parses formats to a header that parses to the same.
			var parts []string
			for _, e := range exts {
				parts = append(parts, e.String())
			}
			back, err := parseExtensions(parts)
			if err != nil || (len(exts) > 0 && !reflect.DeepEqual(back, exts)) {
				t.Fatalf("%q parsed to %+v, formatted to %q, parsed back to %+v, %v", header, exts, parts, back, err)
			}
		}
		sp, answer, err := Negotiate([]string{header}, ServerConfig{})
		if (err != nil) != (perr != nil) || (err != nil && answer != "") {
			t.Fatalf("Negotiate(%q) = %q, %v; the header parses with error %v", header, answer, err, perr)
		}
		if answer != "" {
			// Any answer the server gives is one a plain client accepts,
			// with the same parameters.
			cp, ok, err := Accept([]string{answer}, ClientConfig{})
			if err != nil || !ok {
				t.Fatalf("Negotiate(%q) answered %q, which Accept refuses: %v", header, answer, err)
			}
			if cp.ServerNoContextTakeover != sp.ServerNoContextTakeover || cp.ServerMaxWindowBits != sp.ServerMaxWindowBits ||
				cp.ClientMaxWindowBits > sp.ClientMaxWindowBits || (sp.ClientNoContextTakeover && !cp.ClientNoContextTakeover) {
				t.Fatalf("answer %q: server %+v, client %+v", answer, sp, cp)
			}
		}
		_, _, _ = Accept([]string{header}, ClientConfig{ServerNoContextTakeover: true, ServerMaxWindowBits: 10, ClientMaxWindowBits: 9})
	})
}

// FuzzInflate feeds hostile payloads, as one or two messages, to
// decompressors with and without takeover: they must never panic, never
// exceed the limit, fail only with ErrTooBig or ErrCorrupt, and agree with
// the RFC 1951 oracle whenever both decode.
func FuzzInflate(f *testing.F) {
	for _, s := range []string{
		"f2 48 cd c9 c9 07 00", "00 05 00 fa ff 48 65 6c 6c 6f 00", "f3 48 cd c9 c9 07 00 00",
		"f2 48 05 00 00 00 ff ff ca c9 c9 07 00", "00", "", "06", "fc ff ff ff", "f2 00 11 00 00",
	} {
		f.Add(unhex(f, s), uint16(0), false)
		f.Add(unhex(f, s), uint16(3), true)
	}
	f.Add(zipBomb(f, 4), uint16(100), true)
	f.Add(CompressOnce(nil, sample(1, 3000), 1, 9), uint16(200), true)
	f.Fuzz(func(t *testing.T, data []byte, cut uint16, takeover bool) {
		const limit = 1 << 16
		k := int(cut) % (len(data) + 1)
		msgs := [][]byte{data[:k:k], data[k:]}
		d := NewDecompressor(15, takeover)
		var history []byte
		for i, m := range msgs {
			out, err := d.Inflate(nil, m, limit)
			if err != nil {
				if !errors.Is(err, ErrTooBig) && !errors.Is(err, ErrCorrupt) {
					t.Fatalf("message %d: unexpected error %v", i, err)
				}
				return
			}
			if len(out) > limit {
				t.Fatalf("message %d: %d bytes over a limit of %d", i, len(out), limit)
			}
			if len(m) < 300 {
				if want, _, oerr := oracleInflate(history, withTails(m)); oerr == nil && !bytes.Equal(out, want) {
					t.Fatalf("message %d (%x): inflated to %q, the oracle to %q", i, m, out, want)
				}
			}
			if takeover {
				history = append(history, out...)
			}
		}
	})
}

// FuzzRoundTrip compresses arbitrary messages with every setting and
// checks that they inflate back.
func FuzzRoundTrip(f *testing.F) {
	f.Add([]byte("Hello"), uint8(15), uint8(1), true)
	f.Add([]byte{}, uint8(8), uint8(9), false)
	f.Add(sample(2, 2000), uint8(9), uint8(5), true)
	f.Fuzz(func(t *testing.T, data []byte, bits, level uint8, takeover bool) {
		b := MinWindowBits + int(bits)%(MaxWindowBits-MinWindowBits+1)
		l := int(level) % (BestCompression + 1)
		c := NewCompressor(l, b, takeover)
		d := NewDecompressor(b, takeover)
		half := data[:len(data)/2]
		for i, m := range [][]byte{data, half, data} {
			wire := c.Compress(nil, m)
			out, err := d.Inflate(nil, wire, int64(len(m)))
			if err != nil || !bytes.Equal(out, m) {
				t.Fatalf("message %d (%d bytes, bits %d, level %d, takeover %t): %d bytes back, %v", i, len(m), b, l, takeover, len(out), err)
			}
			if i == 1 {
				c.Idle()
				d.Idle()
			}
		}
	})
}
