package deflate

import (
	"bytes"
	stdflate "compress/flate"
	"errors"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/klauspost/compress/flate"
)

// Short hostile payloads, every two-byte one and a seeded sample of
// three-byte ones, are corrupt for Inflate exactly when they are for
// compress/flate and klauspost/compress reading them with the tail
// (RFC 7692 7.2.2). Payloads that are cut short but valid so far are
// accepted as zlib (npm ws) accepts them, and the other two decoders
// report io.ErrUnexpectedEOF, which is not corruption. Before the
// decoder refused a missing code in a message's last bits, some of the
// sampled payloads (such as 24 41 80) inflated to empty messages.
func TestInflateFindsCorruptionWhereTheOtherDecodersDo(t *testing.T) {
	d := NewDecompressor(15, false)
	check := func(p []byte) {
		in := append(append([]byte(nil), p...), tail[:]...)
		_, serr := io.ReadAll(stdflate.NewReader(bytes.NewReader(in)))
		_, kerr := io.ReadAll(flate.NewReader(bytes.NewReader(in)))
		var se stdflate.CorruptInputError
		var ke flate.CorruptInputError
		_, err := d.Inflate(nil, p, 0)
		if got := errors.Is(err, ErrCorrupt); got != errors.As(serr, &se) || got != errors.As(kerr, &ke) {
			t.Errorf("payload % x: Inflate %v; compress/flate %v; klauspost/compress %v", p, err, serr, kerr)
		}
	}
	for i := range 1 << 16 {
		check([]byte{byte(i), byte(i >> 8)})
	}
	r := rand.New(rand.NewPCG(25, 7692))
	n := 40_000
	if testing.Short() || raceEnabled {
		n = 20_000
	}
	for range n {
		v := r.Uint32()
		check([]byte{byte(v), byte(v >> 8), byte(v >> 16)})
	}
}
